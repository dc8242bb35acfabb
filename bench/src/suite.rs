//! The benchmark scenarios. Every throughput scenario measures the direct backend
//! and mcpgate (and any peers) in alternation, round after round, in one run, so
//! that a noisy neighbour slows both sides alike and the ratios hold.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::client::{Endpoint, HttpConn, StdioClient, is_result, request_body};
use crate::load::{self, Call, Outcome, Spec, Worker};
use crate::procs::{Proc, free_port, wait_port};

/// How long and how big; `smoke` shrinks everything to check that it works.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Rounds of direct/gateway alternation.
    pub rounds: usize,
    /// Length of one measured phase.
    pub phase: Duration,
    /// Warm-up before measuring each side.
    pub warmup: Duration,
    /// Gateway restarts for the cold fan-out measurement.
    pub cold_starts: usize,
    /// Idle sessions to open.
    pub idle_sessions: usize,
    /// Session idle timeout configured for the idle scenario.
    pub idle_timeout: Duration,
    /// Longest wait for memory to come back after the sessions expired.
    pub idle_settle: Duration,
    /// Concurrent GET streams.
    pub sse_streams: usize,
    /// How long they are held.
    pub sse_hold: Duration,
}

impl Sizes {
    /// The full run (a few minutes on 2 cores).
    pub fn full() -> Sizes {
        Sizes {
            rounds: 3,
            phase: Duration::from_millis(1500),
            warmup: Duration::from_millis(500),
            cold_starts: 3,
            idle_sessions: 10_000,
            idle_timeout: Duration::from_secs(5),
            idle_settle: Duration::from_secs(15),
            sse_streams: 2_000,
            sse_hold: Duration::from_secs(30),
        }
    }

    /// The CI smoke run (seconds).
    pub fn smoke() -> Sizes {
        Sizes {
            rounds: 1,
            phase: Duration::from_millis(200),
            warmup: Duration::from_millis(50),
            cold_starts: 1,
            idle_sessions: 200,
            idle_timeout: Duration::from_secs(1),
            idle_settle: Duration::from_secs(1),
            sse_streams: 20,
            sse_hold: Duration::from_secs(1),
        }
    }
}

/// A peer gateway to compare with: a name and a shell command line with `{port}`
/// and `{backend}` (the stdio echo backend's command line).
#[derive(Debug, Clone)]
pub struct Peer {
    /// Column name.
    pub name: String,
    /// Command template.
    pub command: String,
}

/// Paths and settings shared by the scenarios.
pub struct Env {
    /// The mcpgate binary.
    pub gateway: PathBuf,
    /// This binary (it is also the benchmark backend).
    pub me: PathBuf,
    /// Scratch directory for configs and logs.
    pub tmp: PathBuf,
    /// Durations and sizes.
    pub sizes: Sizes,
    /// Peers for `stdio_echo`.
    pub peers: Vec<Peer>,
}

/// A running mcpgate and its URL.
pub struct Gateway {
    /// The process.
    pub proc: Proc,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Env {
    /// Starts the HTTP benchmark backend; returns it and its base URL.
    pub async fn http_backend(
        &self,
        name: &str,
        extra_tools: usize,
    ) -> anyhow::Result<(Proc, String)> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let extra = extra_tools.to_string();
        let mut p = Proc::spawn(
            name,
            &self.me,
            &["backend", "--http", &addr, "--extra-tools", &extra],
            &self.tmp.join(format!("{name}.log")),
        )?;
        wait_port(&mut p, port, Duration::from_secs(10)).await?;
        Ok((p, format!("http://{addr}")))
    }

    /// The stdio backend's command line.
    pub fn stdio_backend_args(&self) -> (String, Vec<String>) {
        (
            self.me.display().to_string(),
            vec!["backend".into(), "--stdio".into()],
        )
    }

    /// Writes the config file of gateway `name` on a free port: `[server]` with the
    /// listen line, `server_extra`, then `backends`. Returns its path and the port.
    pub fn gateway_config(
        &self,
        name: &str,
        server_extra: &str,
        backends: &str,
    ) -> anyhow::Result<(PathBuf, u16)> {
        let port = free_port()?;
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nmax_sessions = 100000\n{server_extra}\n{backends}"
        );
        let path = self.tmp.join(format!("{name}.toml"));
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        Ok((path, port))
    }

    /// Writes `config` (the part after `[server]`'s listen line) and starts mcpgate.
    pub fn spawn_gateway(
        &self,
        name: &str,
        server_extra: &str,
        backends: &str,
    ) -> anyhow::Result<(Proc, u16)> {
        let (path, port) = self.gateway_config(name, server_extra, backends)?;
        let p = Proc::spawn(
            name,
            &self.gateway,
            &["serve", "--config", &path.display().to_string()],
            &self.tmp.join(format!("{name}.log")),
        )?;
        Ok((p, port))
    }

    /// Starts mcpgate and waits until it lists `tools` tools.
    pub async fn gateway(
        &self,
        name: &str,
        server_extra: &str,
        backends: &str,
        tools: usize,
    ) -> anyhow::Result<Gateway> {
        let (mut proc, port) = self.spawn_gateway(name, server_extra, backends)?;
        wait_port(&mut proc, port, Duration::from_secs(20)).await?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let listed = list_tools(&url).await?;
        if listed != tools {
            bail!("{name} lists {listed} tools, expected {tools}");
        }
        Ok(Gateway { proc, url })
    }

    /// A `[backends.NAME]` table for a stdio echo backend.
    pub fn stdio_backend_toml(&self, name: &str) -> String {
        format!(
            "[backends.{name}]\ntype = \"stdio\"\ncommand = {:?}\nargs = [\"backend\", \"--stdio\"]\n",
            self.me.display().to_string()
        )
    }
}

/// Arguments of the echo calls of `http_echo` and `stdio_echo`.
pub const ECHO_ARGS: &str = r#"{"message":"hello from mcpgate-bench"}"#;

/// The backends of the throughput gateway: `h` (the HTTP backend at `base`) and `s`
/// (a stdio child), two tools each.
pub fn echo_backends(env: &Env, base: &str) -> String {
    format!(
        "{}{}",
        http_backend_toml("h", &format!("{base}/mcp")),
        env.stdio_backend_toml("s")
    )
}

/// A `[backends.NAME]` table for an HTTP backend at `url`.
pub fn http_backend_toml(name: &str, url: &str) -> String {
    format!("[backends.{name}]\ntype = \"http\"\nurl = \"{url}\"\n")
}

/// New session + `tools/list` (first page); returns the number of tools.
pub async fn list_tools(url: &str) -> anyhow::Result<usize> {
    let mut conn = HttpConn::connect(&Endpoint::parse(url)?).await?;
    let session = conn.open_session().await?;
    let a = conn
        .post(session.as_deref(), request_body(1, "tools/list", "{}"))
        .await?;
    if let Some(s) = &session {
        conn.delete(s).await;
    }
    let v: Value = serde_json::from_slice(&a.message).context("tools/list answer")?;
    Ok(v["result"]["tools"].as_array().map_or(0, Vec::len))
}

/// One side of a comparison: workers, the process whose CPU is charged to it, and
/// the totals so far.
pub struct Side {
    /// Column name (`direct`, `gateway`, a peer's name).
    pub name: String,
    workers: Vec<Worker>,
    call: Call,
    pid: Option<u32>,
    /// Merged outcome of all rounds.
    pub total: Outcome,
    /// CPU µs of `pid` during the measured phases.
    pub cpu_us: u64,
}

impl Side {
    /// A side issuing `call` on `workers`, charging CPU to `pid`.
    pub fn new(name: &str, workers: Vec<Worker>, call: Call, pid: Option<u32>) -> Side {
        Side {
            name: name.into(),
            workers,
            call,
            pid,
            total: Outcome::empty(),
            cpu_us: 0,
        }
    }

    /// A side measured elsewhere (no workers of its own).
    pub fn from_outcome(name: &str, total: Outcome, cpu_us: u64) -> Side {
        Side {
            name: name.into(),
            workers: Vec::new(),
            call: Call::tool("", "{}"),
            pid: None,
            total,
            cpu_us,
        }
    }

    async fn phase(&mut self, spec: &Spec, measure: bool) {
        let workers = std::mem::take(&mut self.workers);
        let before = self.pid.map_or(0, crate::procs::cpu_us);
        let (workers, out) = load::run(workers, &self.call, spec).await;
        let after = self.pid.map_or(0, crate::procs::cpu_us);
        self.workers = workers;
        if measure {
            self.cpu_us += after.saturating_sub(before);
            self.total.merge(&out);
        }
    }

    /// CPU µs per successful call of the charged process.
    pub fn cpu_per_call(&self) -> f64 {
        self.cpu_us as f64 / self.total.calls.max(1) as f64
    }

    /// Ends the HTTP sessions of this side.
    pub async fn close(&mut self) {
        load::close_http_workers(&mut self.workers).await;
    }
}

/// Warms every side up, then measures them in alternation for `rounds` rounds.
pub async fn alternate(sides: &mut [Side], sizes: &Sizes) {
    let warm = Spec {
        duration: sizes.warmup,
        count: None,
        rate: None,
    };
    let spec = Spec {
        duration: sizes.phase,
        ..warm.clone()
    };
    for s in sides.iter_mut() {
        s.phase(&warm, false).await;
    }
    for _ in 0..sizes.rounds {
        for s in sides.iter_mut() {
            s.phase(&spec, true).await;
        }
    }
}

/// The JSON entry of a direct/gateway pair (the keys every run reports).
pub fn pair_entry(direct: &Side, gateway: &Side) -> Value {
    let (d, g) = (&direct.total, &gateway.total);
    let signed = |a: u64, b: u64| a as i64 - b as i64;
    let mut m = Map::new();
    m.insert("direct_rps".into(), json!(round1(d.rps())));
    m.insert("gateway_rps".into(), json!(round1(g.rps())));
    m.insert("ratio".into(), json!(round3(g.rps() / d.rps().max(1e-9))));
    m.insert("direct_p50_us".into(), json!(d.quantile_us(0.5)));
    m.insert("gateway_p50_us".into(), json!(g.quantile_us(0.5)));
    m.insert(
        "added_p50_us".into(),
        json!(signed(g.quantile_us(0.5), d.quantile_us(0.5))),
    );
    m.insert(
        "added_p99_us".into(),
        json!(signed(g.quantile_us(0.99), d.quantile_us(0.99))),
    );
    for (side, o) in [("direct", d), ("gateway", g)] {
        m.insert(format!("{side}_p90_us"), json!(o.quantile_us(0.9)));
        m.insert(format!("{side}_p99_us"), json!(o.quantile_us(0.99)));
        m.insert(format!("{side}_max_us"), json!(o.hist.max()));
        m.insert(format!("{side}_calls"), json!(o.calls));
        m.insert(format!("{side}_errors"), json!(o.errors));
        if let Some(e) = &o.first_error {
            m.insert(format!("{side}_first_error"), json!(e));
        }
    }
    m.insert(
        "gateway_cpu_us_per_call".into(),
        json!(round1(gateway.cpu_per_call())),
    );
    m.insert(
        "direct_backend_cpu_us_per_call".into(),
        json!(round1(direct.cpu_per_call())),
    );
    Value::Object(m)
}

/// The JSON entry of a peer measured next to the same direct side.
pub fn peer_entry(direct: &Side, gateway: &Side, peer: &Side) -> Value {
    let (d, p) = (&direct.total, &peer.total);
    let signed = |a: u64, b: u64| a as i64 - b as i64;
    json!({
        "rps": round1(p.rps()),
        "ratio": round3(p.rps() / d.rps().max(1e-9)),
        "p50_us": p.quantile_us(0.5),
        "p99_us": p.quantile_us(0.99),
        "added_p50_us": signed(p.quantile_us(0.5), d.quantile_us(0.5)),
        "added_p99_us": signed(p.quantile_us(0.99), d.quantile_us(0.99)),
        "cpu_us_per_call": round1(peer.cpu_per_call()),
        "errors": p.errors,
        "first_error": p.first_error,
        "mcpgate_speedup": round1(gateway.total.rps() / p.rps().max(1e-9)),
    })
}

/// Rounds to one decimal.
pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Rounds to three decimals.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `http_echo`, `stdio_echo` (with peers) and `payload`: one backend, one gateway
/// with an HTTP and a stdio backend, alternated per concurrency.
pub async fn throughput(
    env: &Env,
    only: &dyn Fn(&str) -> bool,
    out: &mut Map<String, Value>,
) -> anyhow::Result<()> {
    let (backend, base) = env.http_backend("backend-echo", 0).await?;
    let backends = echo_backends(env, &base);
    let gw = env.gateway("gateway-echo", "", &backends, 4).await?;
    let echo = ECHO_ARGS;
    if only("http_echo") {
        let mut entries = Map::new();
        for c in [1, 16, 64] {
            let mut sides = [
                Side::new(
                    "direct",
                    load::http_workers(&format!("{base}/mcp"), c, c).await?,
                    Call::tool("echo", echo),
                    Some(backend.pid),
                ),
                Side::new(
                    "gateway",
                    load::http_workers(&gw.url, c, c).await?,
                    Call::tool("h__echo", echo),
                    Some(gw.proc.pid),
                ),
            ];
            alternate(&mut sides, &env.sizes).await;
            entries.insert(format!("c{c}"), pair_entry(&sides[0], &sides[1]));
            for s in &mut sides {
                s.close().await;
            }
            eprintln!("http_echo c{c}: {}", entries[&format!("c{c}")]);
        }
        out.insert("http_echo".into(), Value::Object(entries));
    }
    if only("stdio_echo") {
        out.insert("stdio_echo".into(), stdio_echo(env, &gw, echo).await?);
    }
    if only("payload") {
        let mut entries = Map::new();
        let args = r#"{"bytes":1048576}"#;
        for c in [1, 4] {
            let mut sides = [
                Side::new(
                    "direct",
                    load::http_workers(&format!("{base}/mcp"), c, c).await?,
                    Call::tool("payload", args),
                    Some(backend.pid),
                ),
                Side::new(
                    "gateway",
                    load::http_workers(&gw.url, c, c).await?,
                    Call::tool("h__payload", args),
                    Some(gw.proc.pid),
                ),
            ];
            alternate(&mut sides, &env.sizes).await;
            let mut e = pair_entry(&sides[0], &sides[1]);
            let mib = 1_048_576.0 / 1e6;
            e["direct_mb_s"] = json!(round1(sides[0].total.rps() * mib));
            e["gateway_mb_s"] = json!(round1(sides[1].total.rps() * mib));
            for s in &mut sides {
                s.close().await;
            }
            eprintln!("payload c{c}: {e}");
            entries.insert(format!("c{c}"), e);
        }
        out.insert("payload".into(), Value::Object(entries));
    }
    Ok(())
}

async fn stdio_echo(env: &Env, gw: &Gateway, echo: &str) -> anyhow::Result<Value> {
    let (cmd, args) = env.stdio_backend_args();
    let direct = StdioClient::spawn(&cmd, &args).await?;
    let backend_line = format!("{cmd} {}", args.join(" "));
    let mut peers = Vec::new();
    for p in &env.peers {
        let port = free_port()?;
        let line = p
            .command
            .replace("{port}", &port.to_string())
            .replace("{backend}", &backend_line);
        let mut proc = Proc::spawn_shell(
            &p.name,
            &line,
            &env.tmp.join(format!("peer-{}.log", p.name)),
        )?;
        wait_port(&mut proc, port, Duration::from_secs(60)).await?;
        peers.push((p.name.clone(), proc, format!("http://127.0.0.1:{port}/mcp")));
    }
    let mut entries = Map::new();
    for c in [1, 16] {
        let mut sides = vec![
            Side::new(
                "direct",
                (0..c).map(|_| Worker::Stdio(direct.clone())).collect(),
                Call::tool("echo", echo),
                Some(direct.pid),
            ),
            Side::new(
                "gateway",
                load::http_workers(&gw.url, c, c).await?,
                Call::tool("s__echo", echo),
                Some(gw.proc.pid),
            ),
        ];
        for (name, proc, url) in &peers {
            let workers = load::http_workers(url, c, c)
                .await
                .with_context(|| format!("opening sessions on peer {name}"))?;
            sides.push(Side::new(
                name,
                workers,
                Call::tool("echo", echo),
                Some(proc.pid),
            ));
        }
        alternate(&mut sides, &env.sizes).await;
        let mut e = pair_entry(&sides[0], &sides[1]);
        if sides.len() > 2 {
            let mut pm = Map::new();
            for s in &sides[2..] {
                pm.insert(s.name.clone(), peer_entry(&sides[0], &sides[1], s));
            }
            e["peers"] = Value::Object(pm);
        }
        for s in &mut sides {
            s.close().await;
        }
        eprintln!("stdio_echo c{c}: {e}");
        entries.insert(format!("c{c}"), e);
    }
    direct.stop();
    Ok(Value::Object(entries))
}

/// `fanout_list`: new session + `tools/list` over 1, 4 and 16 HTTP backends,
/// against the cached catalogue, and cold (first session after a start).
pub async fn fanout(env: &Env, out: &mut Map<String, Value>) -> anyhow::Result<f64> {
    const TOOLS_EACH: usize = 6;
    let (_backend, base) = env.http_backend("backend-fanout", TOOLS_EACH - 2).await?;
    let mut entries = Map::new();
    let mut b16_ms = f64::NAN;
    for n in [1usize, 4, 16] {
        let urls: Vec<String> = (0..n).map(|i| format!("{base}/b{i:02}/mcp")).collect();
        let backends: String = urls
            .iter()
            .enumerate()
            .map(|(i, u)| http_backend_toml(&format!("b{i:02}"), u))
            .collect();
        let server = "page_size = 1000\n";
        let gw = env
            .gateway(
                &format!("gateway-fanout{n}"),
                server,
                &backends,
                n * TOOLS_EACH,
            )
            .await?;
        let mut direct = Vec::new();
        for u in &urls {
            direct.push(HttpConn::connect(&Endpoint::parse(u)?).await?);
        }
        let mut via = vec![HttpConn::connect(&Endpoint::parse(&gw.url)?).await?];
        let (mut d, mut g) = (Outcome::empty(), Outcome::empty());
        let mut gw_cpu = 0;
        fanout_phase(&mut direct, env.sizes.warmup).await;
        fanout_phase(&mut via, env.sizes.warmup).await;
        for _ in 0..env.sizes.rounds {
            d.merge(&fanout_phase(&mut direct, env.sizes.phase).await);
            let before = gw.proc.cpu_us();
            g.merge(&fanout_phase(&mut via, env.sizes.phase).await);
            gw_cpu += gw.proc.cpu_us().saturating_sub(before);
        }
        drop(gw);
        let mut cold = Vec::new();
        for k in 0..env.sizes.cold_starts {
            cold.push(
                cold_start(
                    env,
                    &format!("gateway-cold{n}-{k}"),
                    server,
                    &backends,
                    n * TOOLS_EACH,
                )
                .await?,
            );
        }
        cold.sort_by(f64::total_cmp);
        let ds = Side::from_outcome("direct", d, 0);
        let gs = Side::from_outcome("gateway", g, gw_cpu);
        let mut e = pair_entry(&ds, &gs);
        e["gateway_p50_ms"] = json!(round3(gs.total.quantile_us(0.5) as f64 / 1000.0));
        e["cold_ms"] = json!(round1(cold[cold.len() / 2]));
        e.as_object_mut()
            .map(|m| m.remove("direct_backend_cpu_us_per_call"));
        if n == 16 {
            b16_ms = round3(gs.total.quantile_us(0.5) as f64 / 1000.0);
        }
        eprintln!("fanout_list b{n}: {e}");
        entries.insert(format!("b{n}"), e);
    }
    out.insert("fanout_list".into(), Value::Object(entries));
    Ok(b16_ms)
}

/// Closed-loop fan-out iterations for `duration`: on each connection in parallel,
/// initialize + initialized + tools/list; the session is deleted afterwards,
/// outside the timing.
async fn fanout_phase(conns: &mut Vec<HttpConn>, duration: Duration) -> Outcome {
    let mut out = Outcome::empty();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        let taken = std::mem::take(conns);
        let tasks: Vec<_> = taken
            .into_iter()
            .map(|mut c| {
                tokio::spawn(async move {
                    let r = async {
                        let s = c.open_session().await?;
                        let a = c
                            .post(s.as_deref(), request_body(1, "tools/list", "{}"))
                            .await?;
                        anyhow::ensure!(is_result(&a.message), "tools/list failed");
                        Ok::<_, anyhow::Error>(s)
                    }
                    .await;
                    (c, r)
                })
            })
            .collect();
        let mut sessions = Vec::new();
        let mut failed = None;
        for task in tasks {
            let Ok((c, r)) = task.await else { continue };
            match r {
                Ok(s) => sessions.push(s),
                Err(e) => failed = Some(format!("{e:#}")),
            }
            conns.push(c);
        }
        let us = t.elapsed().as_micros() as u64;
        match failed {
            None => {
                out.calls += 1;
                let _ = out.hist.record(us.max(1));
            }
            Some(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
        }
        for (c, s) in conns.iter_mut().zip(sessions) {
            if let Some(s) = s {
                c.delete(&s).await;
            }
        }
    }
    out.elapsed = start.elapsed();
    out
}

/// Milliseconds from starting mcpgate to the first complete `tools/list` answer.
async fn cold_start(
    env: &Env,
    name: &str,
    server: &str,
    backends: &str,
    tools: usize,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let (mut proc, port) = env.spawn_gateway(name, server, backends)?;
    wait_port(&mut proc, port, Duration::from_secs(20)).await?;
    let listed = list_tools(&format!("http://127.0.0.1:{port}/mcp")).await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if listed != tools {
        bail!("{name}: first tools/list had {listed} tools, expected {tools}");
    }
    Ok(ms)
}

/// Where scratch files go.
pub fn scratch_dir(out: &Path) -> PathBuf {
    out.join("tmp")
}
