//! A `server/discover` storm (issue 13, bad input; MCP 2026-07-28 server/discover):
//! probes are stateless. Thousands of them, many at once, each get the same
//! `DiscoverResult` and leave nothing behind: no host session, no backend
//! connection, no bridge pool entry, and the process's memory does not grow with
//! their number (a probe that kept a few hundred bytes would show as megabytes).

mod common;

use common::{McpClient, TestGateway, logged, metric, scrape};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
const PROBES: usize = 4000;
const AT_ONCE: usize = 50;

/// One `server/discover` as a probing SDK sends it; its JSON answer.
async fn probe(c: &McpClient, id: usize) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "storm", "version": "0"}}}});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "server/discover"),
    ];
    let raw = c.post(&h, body.to_string()).await;
    assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    assert!(
        raw.headers.get("mcp-session-id").is_none(),
        "a probe is never given a session"
    );
    serde_json::from_slice(&raw.body).expect("a JSON answer")
}

/// Resident set size of this process (the gateway runs in it), bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

async fn storm(c: &McpClient, from: usize, n: usize) {
    for wave in (from..from + n).step_by(AT_ONCE) {
        let answers =
            futures_util::future::join_all((wave..wave + AT_ONCE).map(|id| probe(c, id))).await;
        for (i, a) in answers.iter().enumerate() {
            assert_eq!(a["id"], wave + i, "{a}");
            assert_eq!(a["result"]["resultType"], "complete", "{a}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_probes_leave_nothing_behind() {
    let gw = TestGateway::start(
        "[server]\nmetrics_listen = \"127.0.0.1:0\"\n\n\
         [backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
         args = [\"--log\", \"${TEST_DIR}/fx.log\"]\nmode = \"per_session\"\n",
    )
    .await;
    let c = gw.client();
    // Warm up: allocator pools, the catalogue's pre-serialized answers.
    storm(&c, 0, 500).await;
    let first = probe(&c, 1).await;
    let log = gw.dir.path("fx.log");
    let handshakes = logged(&log, "initialize").len();
    let before = rss();
    storm(&c, 1000, PROBES).await;
    let grown = rss().saturating_sub(before);
    eprintln!("{PROBES} probes: RSS {before} -> +{grown} bytes");
    assert_eq!(
        probe(&c, 2).await["result"],
        first["result"],
        "the same answer after the storm"
    );
    let text = scrape(&gw).await;
    assert_eq!(
        metric(&text, "mcpgate_sessions_active", &[]),
        Some(0.0),
        "no host session"
    );
    assert_eq!(
        logged(&log, "initialize").len(),
        handshakes,
        "no backend connection was opened for a probe (the backend is per_session)"
    );
    assert!(
        grown < 8 * 1024 * 1024,
        "{PROBES} probes grew the process by {grown} bytes"
    );
}
