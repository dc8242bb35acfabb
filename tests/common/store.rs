//! A real `redis-server` for the shared-store tests: started on a free
//! loopback port without persistence, by pid, killed when dropped. The binary
//! is Debian's `redis-server` (`tests/cluster/ensure-redis.sh` installs it);
//! `redis-cli` (same package set) reads what the gateways wrote.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

/// A running `redis-server`.
pub struct TestRedis {
    child: Option<Child>,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

impl TestRedis {
    /// Starts a server on a free port and waits until it answers `PING`.
    /// Panics, naming the install script, when `redis-server` is missing.
    pub async fn start() -> TestRedis {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut r = TestRedis { child: None, port };
        r.restart().await;
        r
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("redis-server: {e}: run tests/cluster/ensure-redis.sh (apt-get install redis-server)")
            });
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.cli(&["PING"]) == "PONG" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    /// Kills the server (SIGKILL, by pid) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }

    /// Sends `signal` to the server (SIGSTOP: it stops answering, connections
    /// stay open; SIGCONT: it goes on).
    pub fn signal(&self, signal: Signal) {
        if let Some(c) = &self.child {
            kill(Pid::from_raw(c.id() as i32), signal).unwrap();
        }
    }

    /// Runs `redis-cli` against the server; its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    /// How many times Redis executed each command so far, by lower-case name
    /// (`INFO commandstats`).
    pub fn command_calls(&self) -> std::collections::HashMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter_map(|l| l.split_once(':'))
            .filter_map(|(name, v)| {
                let calls = v.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect()
    }

    /// [`TestRedis::command_calls`] by name, heartbeats (`SET`, `PUBSUB
    /// NUMSUB`), inbox reads and connection set-up aside: what requests cost.
    pub fn request_commands(&self) -> std::collections::BTreeMap<String, u64> {
        let background = [
            "set",
            "xread",
            "info",
            "ping",
            "subscribe",
            "pubsub|numsub",
            "hello",
            "client",
        ];
        self.command_calls()
            .into_iter()
            .filter(|(name, _)| !background.contains(&name.as_str()))
            .collect()
    }

    /// How many times Redis executed `command` so far.
    pub fn calls(&self, command: &str) -> u64 {
        self.command_calls().get(command).copied().unwrap_or(0)
    }

    /// The keys matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let out = self.cli(&["--scan", "--pattern", pattern]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// `base64` of 32 bytes 0x01: the `[cluster]` session keys every replica of a
/// shared-store test shares (`MCPGATE_SESSION_KEYS`).
pub const KEYS: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

/// A per-session fake stdio backend `fx` that logs what it receives to
/// `${TEST_DIR}/fx.log`.
pub const FX_LOGGED: &str = "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
    args = [\"--log\", \"${TEST_DIR}/fx.log\"]\nmode = \"per_session\"\n";

/// `mcpgate serve` sharing `redis` (`None`: token-only) with a 200 ms
/// heartbeat, a metrics listener, a 2 s shutdown grace and `backends`.
pub async fn replica(redis: Option<&TestRedis>, backends: &str) -> super::served::Served {
    replica_at(redis.map(TestRedis::url).as_deref(), backends).await
}

/// [`replica`] with the store at `url` (a proxy in front of a [`TestRedis`]).
pub async fn replica_at(url: Option<&str>, backends: &str) -> super::served::Served {
    let cluster = url.map_or(String::new(), |u| {
        format!("[cluster]\nredis = \"{u}\"\nheartbeat = \"200ms\"\n")
    });
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         shutdown_grace = \"2s\"\nsession_idle_timeout = \"10m\"\n{cluster}{backends}"
    );
    super::served::Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", KEYS)]).await
}

/// `/metrics` of a replica (waits up to 5 s for its metrics listener).
pub async fn scrape(gw: &super::served::Served) -> String {
    let end = Instant::now() + Duration::from_secs(5);
    let addr = loop {
        if let Some(a) = gw.logged("metrics listening", "addr") {
            break a;
        }
        assert!(Instant::now() < end, "no metrics listener:\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `client`'s session, spoken to at replica `gw`.
pub fn at(client: &super::McpClient, gw: &super::served::Served) -> super::McpClient {
    let mut c = super::McpClient::new(&gw.url);
    c.session = client.session.clone();
    c.version = client.version.clone();
    c
}

/// The `[backends.fx]` table of the owner tests: the fake stdio backend, one
/// child per session, logging every message it receives (with its pid) to
/// `log`.
pub fn per_session_fx(log: &std::path::Path) -> String {
    format!(
        "[backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--log\", \"{}\"]\nmode = \"per_session\"\n",
        log.display()
    )
}

/// `fx__echo` of `text` through `c`, within 20 s: the response.
pub async fn echo_within(c: &super::McpClient, text: &str) -> serde_json::Value {
    let call = c.call_tool("fx__echo", serde_json::json!({ "text": text }));
    tokio::time::timeout(std::time::Duration::from_secs(20), call)
        .await
        .unwrap_or_else(|_| panic!("no answer to {text} within 20 s"))
        .response
}
