//! Instructions per call: the steady figure to compare builds with.
//!
//! Times on the shared 2-core machines drift ±15–25 % between runs; an instruction
//! count does not. Each scenario starts the gateway (the same binary as the other
//! scenarios) under `valgrind --tool=callgrind`, drives a fixed number of calls
//! through it with the load generator, stops it with SIGTERM (mcpgate shuts down
//! cleanly and callgrind writes its profile on exit) and reads the total of
//! instructions executed (`Ir`). That is done for two call counts N1 < N2, and
//!
//! ```text
//! instructions per call = (I(N2) − I(N1)) / (N2 − N1)
//! ```
//!
//! so start-up, connecting the backends, opening and closing the sessions and
//! shutdown, the same in both runs, cancel out. Only the gateway process is
//! counted: the load generator and the HTTP backend run natively, and the stdio
//! backend, a child of the gateway, is exec'ed outside valgrind
//! (`--trace-children=no`).
//!
//! What does not cancel is work proportional to wall time rather than to calls,
//! because the N2 run lasts longer (and everything runs ~50× slower under
//! valgrind). The gateway's config for these runs therefore pushes its periodic
//! work out of the runs' span: `backend_ping_interval` (health pings) is an hour,
//! and the JSON response window is a minute so that a call slowed down by
//! valgrind is still answered as a JSON body, the path it takes natively. Left
//! are the config-file poll (every 2 s) and the session reaper (every 30 s): an
//! idle gateway executes ~11,000 instructions per second, < 0.1 % of a figure.
//! At C=1 the worker pauses after each answer (`C1_PAUSE`); `bench/README.md`
//! has the measured steadiness.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::load::{self, Call, Worker};
use crate::procs::{Proc, wait_port};
use crate::suite::{ECHO_ARGS, Env, echo_backends, list_tools};

/// Config lines of the counted gateway (after `[server]`'s listen line).
const SERVER_EXTRA: &str = "backend_ping_interval = \"1h\"\njson_response_window = \"60s\"\n";

/// Tokio worker threads of the counted gateway by default: one. With two (the
/// native default on these machines) the C=1 figures moved by 0.5–3 % between
/// runs, more on a loaded machine: which worker runs which task decides how many
/// allocations are freed on another thread (jemalloc tcache flushes and slab
/// refills) and how often a worker steals; with one, two runs of `http_echo_c1` on
/// a machine at load 14 agreed to 8 instructions per call. The cost of the second
/// worker (≈5 % of `http_echo_c1`, varying) is therefore left out of the figure.
pub const DEFAULT_WORKERS: usize = 1;

/// jemalloc options of the counted gateway (tikv-jemallocator reads
/// `_RJEM_MALLOC_CONF`): no decay-based purging of freed pages. jemalloc purges
/// pages unused for ~10 s (`dirty_decay_ms`), a cost proportional to wall time,
/// not to calls: natively a 6,000-call run lasts well under 10 s, under valgrind
/// up to a minute, and the purges showed as `madvise` calls (0.05 per call in
/// `http_echo_c1`) and refilled slabs.
const JEMALLOC_CONF: &str = "dirty_decay_ms:-1,muzzy_decay_ms:-1";

/// Tools the echo gateway lists (echo and payload of `h` and of `s`).
const TOOLS: usize = 4;

/// One counted scenario: the key suffix in `latest.json`, the request and C.
struct Scenario {
    key: &'static str,
    /// Tool to call; `None` = `tools/list` (served from the gateway's catalogue).
    tool: Option<&'static str>,
    /// Concurrent workers, each on its own connection and session.
    c: usize,
    /// Wait after each answer (C=1; see `C1_PAUSE`).
    pause: Duration,
    /// The call's `arguments` (JSON).
    args: &'static str,
    /// The scenario makes N / `scale` calls of the N1/N2 pair: a 1 MiB result
    /// costs ~10,000 times an echo, and valgrind runs ~50× slower than native.
    scale: u64,
    /// With `[cluster]` (a Redis of the run's own, [`crate::cluster::Store`]).
    cluster: bool,
}

/// A `payload` call's arguments: a 1 MiB text result.
const PAYLOAD_ARGS: &str = r#"{"bytes":1048576}"#;

/// At C=1 the worker waits this long after each answer, so that every request
/// finds the gateway idle, as it does natively. In a closed loop the gateway,
/// ~50× slower under valgrind, would often still be finishing the last call when
/// the next request arrives, and skip a wait-for-readiness cycle (poll, timer,
/// epoll) a varying share of the time, with the machine's load: the figure of
/// `tools_list_cached` then moved by 2 % between runs.
const C1_PAUSE: Duration = Duration::from_millis(2);

const SCENARIOS: [Scenario; 9] = [
    Scenario {
        key: "stdio_echo_c1",
        tool: Some("s__echo"),
        c: 1,
        pause: C1_PAUSE,
        args: ECHO_ARGS,
        scale: 1,
        cluster: false,
    },
    Scenario {
        key: "stdio_echo_c16",
        tool: Some("s__echo"),
        c: 16,
        pause: Duration::ZERO,
        args: ECHO_ARGS,
        scale: 1,
        cluster: false,
    },
    Scenario {
        key: "http_echo_c1",
        tool: Some("h__echo"),
        c: 1,
        pause: C1_PAUSE,
        args: ECHO_ARGS,
        scale: 1,
        cluster: false,
    },
    Scenario {
        key: "http_echo_c16",
        tool: Some("h__echo"),
        c: 16,
        pause: Duration::ZERO,
        args: ECHO_ARGS,
        scale: 1,
        cluster: false,
    },
    Scenario {
        key: "tools_list_cached",
        tool: None,
        c: 1,
        pause: C1_PAUSE,
        args: ECHO_ARGS,
        scale: 1,
        cluster: false,
    },
    Scenario {
        key: "payload_http_c1",
        tool: Some("h__payload"),
        c: 1,
        pause: C1_PAUSE,
        args: PAYLOAD_ARGS,
        scale: 100,
        cluster: false,
    },
    Scenario {
        key: "payload_stdio_c1",
        tool: Some("s__payload"),
        c: 1,
        pause: C1_PAUSE,
        args: PAYLOAD_ARGS,
        scale: 100,
        cluster: false,
    },
    Scenario {
        key: "stdio_echo_c16_cluster",
        tool: Some("s__echo"),
        c: 16,
        pause: Duration::ZERO,
        args: ECHO_ARGS,
        scale: 1,
        cluster: true,
    },
    Scenario {
        key: "http_echo_c1_cluster",
        tool: Some("h__echo"),
        c: 1,
        pause: C1_PAUSE,
        args: ECHO_ARGS,
        scale: 1,
        cluster: true,
    },
];

/// Every key the instruction step writes at the top of the results file.
pub fn keys() -> Vec<String> {
    SCENARIOS
        .iter()
        .map(|s| format!("instructions_per_call_{}", s.key))
        .collect()
}

/// What to count and where the profiles go.
pub struct Options {
    /// The smaller call count.
    pub n1: u64,
    /// The larger call count.
    pub n2: u64,
    /// Measurements of each scenario (the figure is their mean; the spread is
    /// reported).
    pub repeat: usize,
    /// Scenario keys to run (all when empty).
    pub only: Vec<String>,
    /// Tokio worker threads of the gateway (`TOKIO_WORKER_THREADS`).
    pub workers: usize,
    /// Where the callgrind files and the `*.top.txt` summaries go.
    pub profiles: PathBuf,
}

/// One counted run: calls, instructions, wall seconds.
struct Count {
    calls: u64,
    instructions: u64,
    /// System calls the gateway made (callgrind's `sysCount`), without
    /// `clock_gettime` (a system call under valgrind, a vDSO call natively).
    syscalls: u64,
    /// `clock_gettime` calls.
    clock_reads: u64,
    wall_s: f64,
}

/// Runs every scenario; returns the `instructions` object of the results file and
/// the top-level `instructions_per_call_*` figures.
pub async fn run(env: &Env, opts: &Options) -> anyhow::Result<(Value, Map<String, Value>)> {
    if opts.n2 <= opts.n1 {
        bail!("N2 ({}) must be larger than N1 ({})", opts.n2, opts.n1);
    }
    let valgrind = tool_version("valgrind").context(
        "valgrind is needed for the instruction counts (apt-get install valgrind); \
         perf stat -e instructions is not offered: it reports <not supported> on these machines",
    )?;
    std::fs::create_dir_all(&opts.profiles)
        .with_context(|| format!("creating {}", opts.profiles.display()))?;
    let (_backend, base) = env.http_backend("backend-instr", 0).await?;
    let backends = echo_backends(env, &base);
    let selected = |s: &&Scenario| opts.only.is_empty() || opts.only.iter().any(|o| o == s.key);
    let store = if SCENARIOS.iter().filter(selected).any(|s| s.cluster) {
        Some(crate::cluster::Store::start(&env.tmp).await?)
    } else {
        None
    };
    let clustered = store
        .as_ref()
        .map(|s| format!("{}{backends}", s.table))
        .unwrap_or_default();
    let mut figures = Map::new();
    let mut detail = Map::new();
    let started = Instant::now();
    for sc in SCENARIOS.iter().filter(selected) {
        let backends = if sc.cluster { &clustered } else { &backends };
        if opts.n2 / sc.scale <= opts.n1 / sc.scale {
            bail!(
                "{}: N1 and N2 / {} make the same number of calls; raise N2",
                sc.key,
                sc.scale
            );
        }
        let mut per_call = Vec::new();
        let mut syscalls = Vec::new();
        let mut clock_reads = Vec::new();
        let mut runs = Vec::new();
        for round in 0..opts.repeat {
            let mut pair = Vec::new();
            for n in [opts.n1, opts.n2] {
                let c = count(env, sc, n, backends, opts).await?;
                eprintln!(
                    "instructions {} N={n} (round {}): {} Ir in {:.1} s",
                    sc.key,
                    round + 1,
                    c.instructions,
                    c.wall_s
                );
                pair.push(c);
            }
            let (a, b) = (&pair[0], &pair[1]);
            let calls = (b.calls - a.calls) as f64;
            let per = (b.instructions as f64 - a.instructions as f64) / calls;
            let sys = (b.syscalls as f64 - a.syscalls as f64) / calls;
            let clocks = (b.clock_reads as f64 - a.clock_reads as f64) / calls;
            per_call.push(per);
            syscalls.push(sys);
            clock_reads.push(clocks);
            runs.push(json!({
                "calls": [a.calls, b.calls],
                "instructions": [a.instructions, b.instructions],
                "syscalls": [a.syscalls, b.syscalls],
                "clock_reads": [a.clock_reads, b.clock_reads],
                "syscalls_per_call": round2(sys),
                "clock_reads_per_call": round2(clocks),
                "wall_s": [round1(a.wall_s), round1(b.wall_s)],
                "per_call": per.round() as i64,
            }));
        }
        let mean = mean_of(&per_call);
        let (lo, hi) = per_call
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                (l.min(v), h.max(v))
            });
        write_top(&opts.profiles, sc, opts, mean)?;
        let spread = (hi - lo) / mean * 100.0;
        if opts.repeat > 1 {
            eprintln!(
                "instructions {}: {} per call (spread of {} pairs {spread:.2} %)",
                sc.key,
                mean.round(),
                opts.repeat
            );
        } else {
            eprintln!("instructions {}: {} per call", sc.key, mean.round());
        }
        figures.insert(
            format!("instructions_per_call_{}", sc.key),
            json!(mean.round() as i64),
        );
        detail.insert(
            sc.key.into(),
            json!({
                "concurrency": sc.c,
                "request": sc.tool.map_or("tools/list".to_owned(), |t| format!("tools/call {t}")),
                "per_call": mean.round() as i64,
                "syscalls_per_call": round2(mean_of(&syscalls)),
                "clock_reads_per_call": round2(mean_of(&clock_reads)),
                "spread_pct": round2(spread),
                "runs": runs,
            }),
        );
    }
    let doc = json!({
        "counter": format!("{valgrind} --tool=callgrind (Ir of the gateway process)"),
        "method": "(Ir(N2) - Ir(N1)) / (N2 - N1)",
        "n1": opts.n1,
        "n2": opts.n2,
        "repeat": opts.repeat,
        "tokio_workers": opts.workers,
        "commit": crate::commit(),
        "date": crate::sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        "wall_s": round1(started.elapsed().as_secs_f64()),
        "scenarios": detail,
    });
    Ok((doc, figures))
}

/// The callgrind file of `key` at `n` calls.
fn profile_path(dir: &Path, key: &str, n: u64) -> PathBuf {
    dir.join(format!("{key}.n{n}.callgrind"))
}

/// One gateway under callgrind: wait until it lists every tool, open C sessions,
/// make `n` calls, close the sessions, SIGTERM, read the profile's total.
async fn count(
    env: &Env,
    sc: &Scenario,
    n: u64,
    backends: &str,
    opts: &Options,
) -> anyhow::Result<Count> {
    let (dir, workers) = (opts.profiles.as_path(), opts.workers);
    let name = format!("gateway-instr-{}-n{n}", sc.key);
    let (config, port) = env.gateway_config(&name, SERVER_EXTRA, backends)?;
    let out = profile_path(dir, sc.key, n);
    // %p: a child forked by the gateway is under valgrind until its exec; should it
    // ever write a profile, it goes to a file of its own.
    let pattern = dir.join(format!("{}.n{n}.%p.callgrind", sc.key));
    let started = Instant::now();
    // `env` execs valgrind (same pid). A fixed number of tokio workers whatever the
    // machine's core count (see `DEFAULT_WORKERS`); jemalloc without time-based
    // purging (see `JEMALLOC_CONF`).
    let mut proc = Proc::spawn(
        &name,
        Path::new("env"),
        &[
            &format!("TOKIO_WORKER_THREADS={workers}"),
            &format!("_RJEM_MALLOC_CONF={JEMALLOC_CONF}"),
            "valgrind",
            "--tool=callgrind",
            "--trace-children=no",
            "--dump-instr=no",
            "--collect-systime=yes",
            &format!("--callgrind-out-file={}", pattern.display()),
            &env.gateway.display().to_string(),
            "serve",
            "--config",
            &config.display().to_string(),
        ],
        &env.tmp.join(format!("{name}.log")),
    )?;
    wait_port(&mut proc, port, Duration::from_secs(120)).await?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    wait_listed(&url, &name).await?;
    let call = match sc.tool {
        Some(tool) => Call::tool(tool, sc.args),
        None => Call {
            method: "tools/list".into(),
            params: "{}".into(),
        },
    };
    let workers = load::http_workers(&url, sc.c, sc.c).await?;
    let mut workers = drive(workers, &call, n / sc.scale, sc.pause)
        .await
        .with_context(|| format!("{name}: calls"))?;
    load::close_http_workers(&mut workers).await;
    drop(workers);
    let status = proc.terminate(Duration::from_secs(120)).await?;
    if !status.success() {
        bail!("{name} exited with {status} (see its log)");
    }
    let wall_s = started.elapsed().as_secs_f64();
    let written = dir.join(format!("{}.n{n}.{}.callgrind", sc.key, proc.pid));
    std::fs::rename(&written, &out)
        .with_context(|| format!("{name}: no profile {}", written.display()))?;
    let instructions = *totals(&out)?
        .get("Ir")
        .with_context(|| format!("{name}: no Ir in {}", out.display()))?;
    let (mut syscalls, mut clock_reads) = (0, 0);
    for (f, k) in by_function(&out, "sysCount", false)? {
        if f.starts_with("clock_gettime") {
            clock_reads += k;
        } else {
            syscalls += k;
        }
    }
    Ok(Count {
        calls: n / sc.scale,
        instructions,
        syscalls,
        clock_reads,
        wall_s,
    })
}

/// `n` calls spread over the workers in a closed loop; with a `pause`, each worker
/// waits that long after every answer. Fails on the first error.
async fn drive(
    workers: Vec<Worker>,
    call: &Call,
    n: u64,
    pause: Duration,
) -> anyhow::Result<Vec<Worker>> {
    let budget = Arc::new(AtomicU64::new(n));
    let mut tasks = Vec::with_capacity(workers.len());
    for mut w in workers {
        let (call, budget) = (call.clone(), budget.clone());
        tasks.push(tokio::spawn(async move {
            while budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok()
            {
                w.call(&call).await?;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            Ok::<_, anyhow::Error>(w)
        }));
    }
    let mut back = Vec::with_capacity(tasks.len());
    for t in tasks {
        back.push(t.await??);
    }
    Ok(back)
}

/// Waits until a fresh session lists every tool (the backends are connected).
async fn wait_listed(url: &str, name: &str) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = list_tools(url).await?;
        if listed == TOOLS {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("{name} lists {listed} tools, expected {TOOLS}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The totals of a callgrind profile by event name (`events:` line, then the
/// `totals:` or `summary:` line): `Ir` = instructions executed, `sysCount` = system
/// calls (with `--collect-systime`).
fn totals(path: &Path) -> anyhow::Result<HashMap<String, u64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let names: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .with_context(|| format!("no events line in {}", path.display()))?
        .split_whitespace()
        .collect();
    let values = text
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .with_context(|| format!("no totals line in {}", path.display()))?;
    let values = values.split_whitespace().map(|v| v.parse::<u64>());
    names
        .into_iter()
        .zip(values)
        .map(|(n, v)| Ok((n.to_owned(), v?)))
        .collect()
}

/// Writes the summary of scenario `sc`: per call by function (the N2 profile minus
/// the N1 profile, over N2 − N1: start-up and shutdown cancel as in the figure),
/// self cost then inclusive, and the self cost of the whole N2 run.
fn write_top(dir: &Path, sc: &Scenario, opts: &Options, per_call: f64) -> anyhow::Result<()> {
    const LINES: usize = 30;
    let (p1, p2) = (
        profile_path(dir, sc.key, opts.n1),
        profile_path(dir, sc.key, opts.n2),
    );
    let calls = ((opts.n2 - opts.n1) / sc.scale) as f64;
    let mut text = format!(
        "# {}: {} instructions per call (C={}, {}, N1={}, N2={}, commit {})\n\
         # From callgrind_annotate --inclusive=no|yes of {} and {}, summed by function\n\
         # (a function inlined from several files is one row). Ir = instructions executed.\n",
        sc.key,
        per_call.round(),
        sc.c,
        sc.tool
            .map_or("tools/list".to_owned(), |t| format!("tools/call {t}")),
        opts.n1 / sc.scale,
        opts.n2 / sc.scale,
        crate::commit(),
        file_name(&p1),
        file_name(&p2),
    );
    for (title, inclusive) in [("self", false), ("inclusive", true)] {
        let rows = per_call_rows(&p1, &p2, "Ir", inclusive, calls)?;
        let _ = write!(
            text,
            "\n## Per call, {title} cost: (Ir(N2) - Ir(N1)) / (N2 - N1), top {LINES}\n\n\
             {:>10}  {:>6}  function\n",
            "Ir/call", "share"
        );
        for (f, v) in rows.iter().take(LINES) {
            let _ = writeln!(text, "{v:>10.0}  {:>5.1}%  {f}", v / per_call * 100.0);
        }
    }
    let rows = per_call_rows(&p1, &p2, "sysCount", false, calls)?;
    let _ = write!(
        text,
        "\n## Per call, system calls by function (sysCount; under valgrind clock_gettime\n\
         ## is a system call, natively a vDSO call without a kernel entry)\n\n\
         {:>10}  function\n",
        "calls/call"
    );
    for (f, v) in rows.iter().take(12).filter(|(_, v)| *v >= 0.005) {
        let _ = writeln!(text, "{v:>10.2}  {f}");
    }
    let whole = by_function(&p2, "Ir", false)?;
    let total: u64 = whole.values().sum();
    let mut rows: Vec<(&String, &u64)> = whole.iter().collect();
    rows.sort_by(|x, y| y.1.cmp(x.1).then_with(|| x.0.cmp(y.0)));
    let _ = write!(
        text,
        "\n## Whole N2 run (start-up and shutdown included), self cost, top {LINES}\n\n\
         {:>12}  {:>6}  function\n",
        "Ir", "share"
    );
    for (f, v) in rows.iter().take(LINES) {
        let _ = writeln!(
            text,
            "{v:>12}  {:>5.1}%  {f}",
            **v as f64 / total.max(1) as f64 * 100.0
        );
    }
    let summary = dir.join(format!("{}.top.txt", sc.key));
    std::fs::write(&summary, text).with_context(|| format!("writing {}", summary.display()))
}

/// `event` per call by function: (N2 profile − N1 profile) / `calls`, largest first.
fn per_call_rows(
    p1: &Path,
    p2: &Path,
    event: &str,
    inclusive: bool,
    calls: f64,
) -> anyhow::Result<Vec<(String, f64)>> {
    let (a, b) = (
        by_function(p1, event, inclusive)?,
        by_function(p2, event, inclusive)?,
    );
    let mut rows: Vec<(String, f64)> = b
        .iter()
        .map(|(f, &v)| {
            let before = a.get(f).copied().unwrap_or(0);
            (f.clone(), (v as f64 - before as f64) / calls)
        })
        .collect();
    rows.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    Ok(rows)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// `callgrind_annotate` of `profile`: `event` (`Ir`, `sysCount`) summed by function
/// name, self or inclusive.
fn by_function(
    profile: &Path,
    event: &str,
    inclusive: bool,
) -> anyhow::Result<HashMap<String, u64>> {
    let out = std::process::Command::new("callgrind_annotate")
        .arg("--auto=no")
        .arg(format!("--show={event}"))
        .arg(format!("--sort={event}"))
        .arg("--threshold=100")
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg(profile)
        .output()
        .context("running callgrind_annotate")?;
    if !out.status.success() {
        bail!(
            "callgrind_annotate {}: {}",
            profile.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse_annotated(&String::from_utf8_lossy(&out.stdout)))
}

/// Function rows of `callgrind_annotate` output (`1,234 ( 5.6%)  file:function [object]`)
/// summed by function; the object is kept (as `[name]`) when it is a shared library.
fn parse_annotated(text: &str) -> HashMap<String, u64> {
    let mut by_fn = HashMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.contains("file:function") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let line = line.trim();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ir) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, r)| r).trim_start(),
            None => rest,
        };
        let (site, object) = match rest.rsplit_once(" [") {
            Some((site, obj)) if obj.ends_with(']') => (site, Some(obj.trim_end_matches(']'))),
            _ => (rest, None),
        };
        let func = site.split_once(':').map_or(site, |(_, f)| f);
        let name = match object {
            Some(obj) if obj.contains(".so") => {
                format!("{func} [{}]", obj.rsplit('/').next().unwrap_or(obj))
            }
            _ => func.to_owned(),
        };
        *by_fn.entry(name).or_insert(0) += ir;
    }
    by_fn
}

/// `valgrind --version`, if it runs.
pub fn tool_version(tool: &str) -> Option<String> {
    let out = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn mean_of(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_totals_and_annotations() {
        let dir = std::env::temp_dir().join(format!("mcpgate-bench-instr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.callgrind");
        std::fs::write(
            &p,
            "events: Ir sysCount sysTime\nfn=main\n1 5\nsummary: 12345 7 1\ntotals: 12345 7 1\n",
        )
        .unwrap();
        let t = totals(&p).unwrap();
        assert_eq!((t["Ir"], t["sysCount"], t.len()), (12345, 7, 3));
        std::fs::remove_dir_all(&dir).unwrap();
        let annotated = "--------\nProfile data file 'x'\n--------\n\
            100 (100.0%)  PROGRAM TOTALS\n\n--------\nIr          file:function\n--------\n\
            60 (60.0%)  a.rs:f [/bin/x]\n1,040 ( 4.0%)  b.rs:g\n7 ( 0.0%)  c.rs:g\n\
            5 ( 0.0%)  ./string/memcpy.S:memcpy [/usr/lib/libc.so.6]\n";
        let m = parse_annotated(annotated);
        assert_eq!(m.len(), 3);
        assert_eq!((m["f"], m["g"], m["memcpy [libc.so.6]"]), (60, 1047, 5));
    }
}
