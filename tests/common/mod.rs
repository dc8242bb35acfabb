//! Integration-test harness: a real gateway on 127.0.0.1:0 with real (fake)
//! backends, a small MCP HTTP client, and helpers for logs and processes.
//!
//! Each test binary uses only part of this module.
#![allow(dead_code)]

pub mod client;
#[path = "../support/fake_http.rs"]
pub mod fake_http;
#[path = "../support/fake_sse.rs"]
pub mod fake_sse;
#[path = "../support/http_tasks.rs"]
pub mod http_tasks;
#[path = "../support/modern.rs"]
pub mod modern;
pub mod modern_host;
pub mod proxy;
#[path = "../support/recorded.rs"]
pub mod recorded;
pub mod served;
pub mod store;
#[path = "../support/tools.rs"]
pub mod tools;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcpgate::Gateway;
use mcpgate::config::Config;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;

#[allow(unused_imports)]
pub use client::{McpClient, Raw, Rpc, SseStream};
#[allow(unused_imports)]
pub use fake_http::{Discover, FakeHttp, FakeHttpOptions};
#[allow(unused_imports)]
pub use fake_sse::FakeSse;

/// Path of the fake stdio backend: the `mcpgate-fake-stdio` example
/// (`tests/support/fake_stdio.rs`), `target/<profile>/examples/mcpgate-fake-stdio`.
///
/// Cargo defines `CARGO_BIN_EXE_*` for binaries only, so the path is found from the
/// test binary's own (`target/<profile>/deps/<test>-<hash>`). `cargo test` builds the
/// example; `cargo test --test NAME` does not. Panics if it is missing or older than
/// its sources, naming the command that builds it.
pub fn fake_stdio() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let path = exe
            .parent()
            .and_then(Path::parent)
            .map(|profile| profile.join("examples/mcpgate-fake-stdio"))
            .unwrap_or_else(|| panic!("{} is not under target/<profile>/deps", exe.display()));
        let build =
            "run `cargo build --example mcpgate-fake-stdio` (plain `cargo test` builds it too)";
        let built = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("{}: {e}: {build}", path.display()));
        for src in [
            "tests/support/fake_stdio.rs",
            "tests/support/tasks.rs",
            "tests/support/tools.rs",
            "tests/support/modern.rs",
        ] {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
            if std::fs::metadata(&src)
                .and_then(|m| m.modified())
                .is_ok_and(|m| m > built)
            {
                panic!(
                    "{} is older than {}: {build}",
                    path.display(),
                    src.display()
                );
            }
        }
        path.to_str().expect("UTF-8 target path").to_owned()
    })
}

/// A per-test temporary directory, removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    /// A fresh empty directory.
    pub fn new() -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "mcpgate-it-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    /// A path inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fake stdio backend as `fx` (tools `fx__*`), default connection mode.
pub const FX: &str = "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n";

/// [`FX`] writing what it receives to `${TEST_DIR}/fx.log` (read with
/// [`logged_calls`]).
pub const FX_LOGGED: &str = "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
    args = [\"--log\", \"${TEST_DIR}/fx.log\"]\n";

/// A gateway started for one test.
pub struct TestGateway {
    gw: Option<Gateway>,
    /// The listen address.
    pub addr: SocketAddr,
    /// The MCP endpoint URL.
    pub url: String,
    /// The test's temporary directory (`${TEST_DIR}` in configs).
    pub dir: TestDir,
}

/// Parses `toml` with `${FAKE_STDIO}` and `${TEST_DIR}` defined.
pub fn parse_config(toml: &str, dir: &Path) -> Config {
    let dir = dir.to_string_lossy().into_owned();
    let env = move |name: &str| match name {
        "FAKE_STDIO" => Some(fake_stdio().to_owned()),
        "TEST_DIR" => Some(dir.clone()),
        _ => None,
    };
    match Config::parse(toml, Path::new("test.toml"), &env) {
        Ok(c) => c,
        Err(problems) => panic!("test config does not parse: {problems:?}\n{toml}"),
    }
}

impl TestGateway {
    /// Starts a gateway for `toml` in a fresh temporary directory.
    pub async fn start(toml: &str) -> TestGateway {
        TestGateway::start_in(TestDir::new(), toml).await
    }

    /// Starts a gateway for `toml` using `dir` as `${TEST_DIR}`.
    pub async fn start_in(dir: TestDir, toml: &str) -> TestGateway {
        let config = parse_config(toml, &dir.0);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gw = Gateway::start_on(config, listener).await.unwrap();
        let addr = gw.local_addr;
        TestGateway {
            gw: Some(gw),
            addr,
            url: format!("http://{addr}/mcp"),
            dir,
        }
    }

    /// A client without a session.
    pub fn client(&self) -> McpClient {
        McpClient::new(&self.url)
    }

    /// A client with an initialized 2025-11-25 session declaring `caps`.
    pub async fn session_with(&self, caps: Value) -> McpClient {
        let mut c = self.client();
        c.initialize(caps).await;
        c
    }

    /// A client with an initialized 2025-11-25 session and no client capabilities.
    /// A 2025-11-25 session opened by a client at `addr` (`X-Forwarded-For`,
    /// for a gateway that trusts the loopback proxy).
    pub async fn session_from(&self, addr: &str) -> McpClient {
        let mut c = self.client();
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "it", "version": "0"}}});
        let raw = c.post(&[("x-forwarded-for", addr)], body.to_string()).await;
        assert_eq!(raw.status, 200, "{raw:?}");
        c.session = raw.header("mcp-session-id").map(str::to_owned);
        c.version = Some("2025-11-25".into());
        let ack = c.notify("notifications/initialized", None).await;
        assert_eq!(ack.status, 202);
        c
    }

    pub async fn session(&self) -> McpClient {
        self.session_with(json!({})).await
    }

    /// The gateway itself.
    pub fn gateway(&self) -> &Gateway {
        self.gw.as_ref().unwrap()
    }

    /// Shuts the gateway down and returns its directory (for a restart).
    pub async fn shutdown(mut self) -> TestDir {
        if let Some(gw) = self.gw.take() {
            gw.shutdown().await;
        }
        std::mem::replace(&mut self.dir, TestDir(PathBuf::new()))
    }
}

/// Polls `f` every 20 ms until it holds or `within` passed; returns whether it held.
pub async fn wait_for(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every entry of a fake-stdio `--log` file (missing file = no entries).
pub fn read_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Inbound messages with JSON-RPC method `method` in a fake-stdio log.
pub fn logged(path: &Path, method: &str) -> Vec<Value> {
    read_log(path)
        .into_iter()
        .filter(|e| e.pointer("/msg/method").and_then(Value::as_str) == Some(method))
        .collect()
}

/// Inbound `tools/call` messages for tool `tool` in a fake-stdio log.
pub fn logged_calls(path: &Path, tool: &str) -> Vec<Value> {
    logged(path, "tools/call")
        .into_iter()
        .filter(|e| e.pointer("/msg/params/name").and_then(Value::as_str) == Some(tool))
        .collect()
}

/// PIDs of every fake-stdio process that wrote to a log.
pub fn logged_pids(path: &Path) -> BTreeSet<u32> {
    read_log(path)
        .iter()
        .filter_map(|e| e.get("pid").and_then(Value::as_u64))
        .map(|p| p as u32)
        .collect()
}

/// The state letter of a process (`R`, `S`, `Z`, ...) and its parent, if it exists.
pub fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether a process is running (exists and is not a zombie).
pub fn running(pid: u32) -> bool {
    proc_state(pid).is_some_and(|(s, _)| s != 'Z')
}

/// Whether a process is fully gone: not running, and not a zombie of ours
/// (a zombie child of this test process would mean the gateway never reaped it).
pub fn gone(pid: u32) -> bool {
    match proc_state(pid) {
        None => true,
        Some(('Z', ppid)) => ppid != std::process::id(),
        Some(_) => false,
    }
}

/// The text of the first content block of a `tools/call` result.
pub fn text_of(response: &Value) -> &str {
    response
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text result in {response}"))
}

/// The exposed names in a `tools/list`/`prompts/list` result list.
pub fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The Prometheus text of the gateway's `/metrics` listener (the config must set
/// `server.metrics_listen`, e.g. `"127.0.0.1:0"`).
pub async fn scrape(gw: &TestGateway) -> String {
    let addr = gw
        .gateway()
        .metrics_addr
        .expect("the test config sets server.metrics_listen");
    let resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("GET /metrics");
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

/// The sum of the samples of `name` whose labels include every one of `labels`
/// (`None` when there is no such sample).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, l) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if n != name {
            continue;
        }
        let all = labels
            .iter()
            .all(|(k, v)| l.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if all {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    found
}
