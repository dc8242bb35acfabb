//! One client cannot lock every other out of `initialize` (a newcomer finding:
//! 10,000 initializes in 4.6 s filled `server.max_sessions`, then every
//! `initialize` was 503 for ~30 min, with one WARN line per refusal). A client
//! (principal, or address through `trusted_proxies`) holds at most
//! `server.max_sessions_per_client` sessions; at either limit the oldest
//! session that was never used (no request after `initialize`) and is older
//! than a few seconds is ended to make room — the client's own at its share,
//! any at the global cap — and its id then gets 404 (the host re-initializes).
//! With a shared store only that replica's copy goes (never used *here* may be
//! in use on another replica; its record restores it). Refusals are logged
//! once, then summarized, also when no later refusal comes to write the
//! summary.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{KEYS, TestRedis, scrape as scrape_served};
use common::{McpClient, Raw, TestGateway, metric, scrape};
use serde_json::json;

/// How long a never-used session is spared (the gateway's grace, plus margin).
const GRACE: Duration = Duration::from_millis(5300);

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string()
}

/// An `initialize` at `url` from a client at `addr` (`X-Forwarded-For` from
/// the trusted loopback proxy; `None`: the TCP peer), and the client with
/// its session when it was opened.
async fn initialize(url: &str, addr: Option<&str>) -> (Raw, McpClient) {
    let mut c = McpClient::new(url);
    let extra: Vec<(&str, &str)> = addr.map(|a| ("x-forwarded-for", a)).into_iter().collect();
    let raw = c.post(&extra, initialize_body()).await;
    if raw.status == 200 {
        c.session = raw.header("mcp-session-id").map(str::to_owned);
        c.version = Some("2025-11-25".into());
        let ack = c.notify("notifications/initialized", None).await;
        assert_eq!(ack.status, 202);
    }
    (raw, c)
}

async fn opened(url: &str, addr: Option<&str>) -> McpClient {
    let (raw, c) = initialize(url, addr).await;
    assert_eq!(raw.status, 200, "{raw:?}");
    c
}

/// The HTTP status of a `ping` on `c`'s session.
async fn ping(c: &McpClient) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    c.post(&[], body).await.status.as_u16()
}

#[tokio::test]
async fn a_client_at_its_share_makes_room_among_its_own_never_used_sessions() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        trusted_proxies = ["127.0.0.1/32"]
        max_sessions = 8
        max_sessions_per_client = 2
        "#,
    )
    .await;
    let me = Some("192.0.2.1");
    let used = opened(&gw.url, me).await;
    assert_eq!(ping(&used).await, 200);
    let unused = opened(&gw.url, me).await;

    // At its share, with nothing old enough to end: refused, 429.
    let (refused, _) = initialize(&gw.url, me).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    let message = refused.json()["error"]["message"].to_string();
    assert!(message.contains("max_sessions_per_client"), "{message}");
    // Another client is not affected.
    let other = opened(&gw.url, Some("192.0.2.2")).await;

    // Once the never-used session is a few seconds old it makes room.
    tokio::time::sleep(GRACE).await;
    let again = opened(&gw.url, me).await;
    assert_eq!(ping(&unused).await, 404, "the never-used session ended");
    assert_eq!(ping(&used).await, 200, "a used session is never taken");
    assert_eq!(ping(&again).await, 200);
    assert_eq!(ping(&other).await, 200);
    // Both of the client's sessions are used now: nothing to take.
    let (refused, _) = initialize(&gw.url, me).await;
    assert_eq!(refused.status, 429, "{refused:?}");

    let text = scrape(&gw).await;
    let evicted = |reason| {
        metric(
            &text,
            "mcpgate_sessions_evicted_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(evicted("per_client"), Some(1.0), "{text}");
    assert_eq!(evicted("max_sessions"), Some(0.0), "{text}");
    let rejected = metric(
        &text,
        "mcpgate_rejections_total",
        &[("reason", "too_many_client_sessions")],
    );
    assert_eq!(rejected, Some(2.0), "{text}");
}

#[tokio::test]
async fn at_the_cap_the_oldest_never_used_copy_makes_room_and_its_record_lives() {
    let redis = TestRedis::start().await;
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
max_sessions = 3
max_sessions_per_client = 3
[cluster]
redis = "{}"
heartbeat = "200ms"
[backends.fx]
type = "stdio"
command = "${{FAKE_STDIO}}"
mode = "per_session"
"#,
        redis.url()
    );
    let gw = Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", KEYS)]).await;
    let used = opened(&gw.url, None).await;
    assert_eq!(ping(&used).await, 200);
    let oldest = opened(&gw.url, None).await;
    let _younger = opened(&gw.url, None).await;

    // Full, and nothing is old enough: 503, logged once.
    for _ in 0..5 {
        let (refused, _) = initialize(&gw.url, None).await;
        assert_eq!(refused.status, 503, "{refused:?}");
        assert!(refused.header("retry-after").is_some());
    }
    let warned = gw
        .log()
        .lines()
        .filter(|l| l.contains("session limit reached"))
        .count();
    assert_eq!(warned, 1, "one WARN, not one per refusal:\n{}", gw.log());

    tokio::time::sleep(GRACE).await;
    let newest = opened(&gw.url, None).await;
    assert_eq!(ping(&used).await, 200);
    assert_eq!(ping(&newest).await, 200);
    let text = scrape_served(&gw).await;
    let evicted = metric(
        &text,
        "mcpgate_sessions_evicted_total",
        &[("reason", "max_sessions")],
    );
    assert_eq!(
        evicted,
        Some(1.0),
        "the oldest never-used copy made room: {text}"
    );
    // Only this replica's copy went: "never used" is what this replica saw,
    // and the session may be in use on another one. Its record lives on, and
    // it is restored (making room in turn from the younger never-used copy).
    assert_eq!(
        ping(&oldest).await,
        200,
        "an evicted session's record survives with a shared store"
    );
    let text = scrape_served(&gw).await;
    let evicted = metric(
        &text,
        "mcpgate_sessions_evicted_total",
        &[("reason", "max_sessions")],
    );
    assert_eq!(evicted, Some(2.0), "the restore made room too: {text}");
}

/// A flood's refusals after the first line are reported once the window
/// closes, whether or not a later refusal comes (a newcomer's flood of 568
/// refusals was logged as `refused=1`: nothing came after it to write the rest).
#[tokio::test]
async fn refusals_after_the_first_line_are_summarized_without_a_later_one() {
    let config = r#"
[server]
listen = "127.0.0.1:0"
max_sessions = 1
max_sessions_per_client = 1
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
mode = "per_session"
pool_idle_timeout = "2s"
"#;
    let gw = Served::start(config).await;
    let used = opened(&gw.url, None).await;
    assert_eq!(ping(&used).await, 200);
    for _ in 0..3 {
        let (refused, _) = initialize(&gw.url, None).await;
        assert_eq!(refused.status, 503, "{refused:?}");
    }
    let summary = "more new sessions were refused since the last such line";
    assert!(!gw.log().contains(summary), "{}", gw.log());
    // The window (10 s) closes; the idle sweep (every 0.5 s here) writes it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !gw.log().contains(summary) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains(summary))
        .unwrap_or_else(|| panic!("no summary:\n{log}"));
    assert!(line.contains(r#""refused":2"#), "{line}");
    let warned = log
        .lines()
        .filter(|l| l.contains("session limit reached"))
        .count();
    assert_eq!(warned, 2, "the first line and one summary:\n{log}");
}
