//! Idle sessions do not hold a client's per-session connections for good (a
//! newcomer finding: 65 sessions from 127.0.0.1 that made one call each and
//! never sent DELETE locked every later local session out of a per_session
//! backend until they idled out, 30 min). When a client is at
//! `max_connections_per_client`, or the backend at `max_connections`, the
//! least recently used connection unused for `reclaim_idle_after` (of that
//! client; for the backend's limit, of any client) is closed instead of the
//! call being refused. Its session keeps working: its next call gets a fresh
//! child, set up with the session's log level again. A connection with a call
//! in flight, or one holding the session's subscriptions, is never reclaimed.

mod common;

use std::time::Duration;

use common::{McpClient, TestGateway, gone, logged, metric, running, scrape, text_of, wait_for};
use serde_json::{Value, json};

/// The pid of the fake child that answered the last `tools/call`.
fn last_call_pid(gw: &TestGateway) -> u32 {
    let calls = logged(&gw.dir.path("ps.log"), "tools/call");
    let pid = calls.last().and_then(|e| e["pid"].as_u64()).unwrap_or(0);
    u32::try_from(pid).unwrap_or(0)
}

/// The error message of a JSON-RPC answer (`""` for a result).
fn error_of(response: &Value) -> String {
    response["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn echo(s: &McpClient, text: &str) -> Value {
    s.call_tool("ps__echo", json!({ "text": text }))
        .await
        .response
}

#[tokio::test]
async fn a_clients_idle_connection_is_reclaimed_for_its_next_session() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 8
        max_connections_per_client = 2
        reclaim_idle_after = "1s"
        "#,
    )
    .await;
    let log = gw.dir.path("ps.log");
    let a = gw.session().await;
    let r = a
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    assert_eq!(text_of(&echo(&a, "a").await), "a");
    let a_child = last_call_pid(&gw);
    let b = gw.session().await;
    assert_eq!(text_of(&echo(&b, "b").await), "b");
    let b_child = last_call_pid(&gw);

    // Both connections were used just now: not idle long enough, refused.
    let c = gw.session().await;
    let refused = echo(&c, "c").await;
    assert!(
        error_of(&refused).contains("max_connections_per_client"),
        "{refused}"
    );

    // Once they idled for reclaim_idle_after, the least recently used (a's)
    // is closed and c gets a child.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(text_of(&echo(&c, "c").await), "c", "c is served");
    assert!(
        wait_for(Duration::from_secs(5), || gone(a_child)).await,
        "a's idle child was stopped"
    );
    assert!(running(b_child), "b's child, used after a's, stays");

    // a goes on: its next call gets a fresh child (b's, now the least
    // recently used idle one, makes room), which gets a's log level again.
    assert_eq!(text_of(&echo(&a, "again").await), "again");
    let a_new = last_call_pid(&gw);
    assert_ne!(a_new, a_child, "a fresh child");
    let levels: Vec<u64> = logged(&log, "logging/setLevel")
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert!(
        levels.contains(&u64::from(a_new)),
        "the log level is set again on the fresh child: {levels:?}"
    );
    assert!(wait_for(Duration::from_secs(5), || gone(b_child)).await);
    let text = scrape(&gw).await;
    let reclaimed = [("backend", "ps"), ("reason", "per_client")];
    assert_eq!(
        metric(
            &text,
            "mcpgate_backend_connections_reclaimed_total",
            &reclaimed
        ),
        Some(2.0),
        "{text}"
    );
}

#[tokio::test]
async fn a_connection_in_use_or_holding_subscriptions_is_not_reclaimed() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log", "--subscribe"]
        mode = "per_session"
        max_connections = 8
        max_connections_per_client = 2
        reclaim_idle_after = "1s"
        "#,
    )
    .await;
    let log = gw.dir.path("ps.log");
    let watcher = gw.session().await;
    let r = watcher
        .request("resources/subscribe", json!({"uri": "ps+fx://static"}))
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    let watching = logged(&log, "resources/subscribe")[0]["pid"]
        .as_u64()
        .unwrap() as u32;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // A call that runs for 3 s: its connection was last used when it started.
    let busy = gw.session().await;
    let sleeper = tokio::spawn({
        let busy = busy.clone();
        async move { busy.call_tool("ps__sleep", json!({"s": 3})).await.response }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = gw.session().await;
    let refused = echo(&c, "c").await;
    assert!(
        error_of(&refused).contains("max_connections_per_client"),
        "neither the subscribed nor the busy connection is taken: {refused}"
    );
    assert!(running(watching));
    let slept = sleeper.await.unwrap();
    assert!(slept.get("result").is_some(), "the long call ends: {slept}");
    // Its answer came just now: the connection is not idle (last used when
    // the answer came, not when the call was sent 3 s ago).
    let refused = echo(&c, "c").await;
    assert!(
        error_of(&refused).contains("max_connections_per_client"),
        "a connection whose long call just ended is not reclaimed: {refused}"
    );
    // Idle for reclaim_idle_after after its call: now it can go.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(text_of(&echo(&c, "c").await), "c");
    assert!(running(watching), "the subscribed child stays");
}

#[tokio::test]
async fn at_max_connections_the_least_recently_used_of_any_client_is_reclaimed() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        trusted_proxies = ["127.0.0.1/32"]
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 2
        max_connections_per_client = 2
        reclaim_idle_after = "1s"
        "#,
    )
    .await;
    let a = gw.session_from("192.0.2.1").await;
    assert_eq!(text_of(&echo(&a, "a").await), "a");
    let a_child = last_call_pid(&gw);
    let b = gw.session_from("192.0.2.1").await;
    assert_eq!(text_of(&echo(&b, "b").await), "b");
    let b_child = last_call_pid(&gw);
    let other = gw.session_from("192.0.2.2").await;
    let refused = echo(&other, "o").await;
    assert!(error_of(&refused).contains("max_connections"), "{refused}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(text_of(&echo(&other, "o").await), "o");
    assert!(wait_for(Duration::from_secs(5), || gone(a_child)).await);
    assert!(running(b_child));
    let text = scrape(&gw).await;
    let reclaimed = [("backend", "ps"), ("reason", "max_connections")];
    assert_eq!(
        metric(
            &text,
            "mcpgate_backend_connections_reclaimed_total",
            &reclaimed
        ),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn at_max_connections_the_callers_own_idle_connection_goes_first() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        trusted_proxies = ["127.0.0.1/32"]
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 2
        max_connections_per_client = 1
        reclaim_idle_after = "1s"
        "#,
    )
    .await;
    // Another client's connection is the least recently used one.
    let other = gw.session_from("192.0.2.2").await;
    assert_eq!(text_of(&echo(&other, "o").await), "o");
    let other_child = last_call_pid(&gw);
    let a = gw.session_from("192.0.2.1").await;
    assert_eq!(text_of(&echo(&a, "a").await), "a");
    let a_child = last_call_pid(&gw);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // The backend is full and the caller's client at its share: closing the
    // other client's connection would not let it in; its own goes, alone.
    let c = gw.session_from("192.0.2.1").await;
    assert_eq!(text_of(&echo(&c, "c").await), "c");
    assert!(wait_for(Duration::from_secs(5), || gone(a_child)).await);
    assert!(running(other_child), "the other client's connection stays");
    let text = scrape(&gw).await;
    let total: f64 = ["max_connections", "per_client"]
        .iter()
        .filter_map(|r| {
            let labels = [("backend", "ps"), ("reason", *r)];
            metric(
                &text,
                "mcpgate_backend_connections_reclaimed_total",
                &labels,
            )
        })
        .sum();
    assert_eq!(total, 1.0, "one connection reclaimed: {text}");
    assert_eq!(text_of(&echo(&other, "o2").await), "o2", "and not replaced");
    assert_eq!(last_call_pid(&gw), other_child);
}

/// A 2026-07-28 backend's per-session connection keeps one request open for
/// as long as it lives: its own `subscriptions/listen`. That is not a call in
/// flight: counted as one, no such connection was ever reclaimed (nor closed
/// at `idle_timeout`), and the default config's demo backend (2026-07-28,
/// which serves the listen) kept refusing a client at its share (newcomer
/// finding, 2026-12-07).
#[tokio::test]
async fn a_modern_backends_idle_connection_is_reclaimed_despite_its_standing_listen() {
    let gw = TestGateway::start(&format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.demo]
        type = "stdio"
        command = "{}"
        args = ["demo-server"]
        mode = "per_session"
        max_connections = 8
        max_connections_per_client = 1
        reclaim_idle_after = "1s"
        "#,
        env!("CARGO_BIN_EXE_mcpgate")
    ))
    .await;
    let echo = |s: &McpClient, text: &'static str| {
        let s = s.clone();
        async move {
            s.call_tool("demo__echo", json!({ "text": text }))
                .await
                .response
        }
    };
    let a = gw.session().await;
    assert_eq!(text_of(&echo(&a, "a").await), "a");
    let b = gw.session().await;
    let refused = echo(&b, "b").await;
    assert!(
        error_of(&refused).contains("max_connections_per_client"),
        "{refused}"
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(text_of(&echo(&b, "b").await), "b", "b is served");
    let text = scrape(&gw).await;
    let reclaimed = metric(
        &text,
        "mcpgate_backend_connections_reclaimed_total",
        &[("backend", "demo"), ("reason", "per_client")],
    );
    assert_eq!(reclaimed, Some(1.0), "{text}");
}
