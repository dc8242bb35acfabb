//! Per-session connections stay bounded (a field failure elsewhere: per-session
//! spawning let the process count grow without bound): at most `max_connections`
//! at once. Their lifetime is consistent with their session's: by default a
//! per-session connection lives as long as its session; an `idle_timeout` shorter
//! than `server.session_idle_timeout` is refused (it would silently drop backend
//! state of a live session); an explicit one never closes a connection that holds
//! the session's subscriptions; and a replaced connection (closed for idleness,
//! or lost) gets the session's log level and subscriptions again.

mod common;

use std::time::Duration;

use common::{TestGateway, gone, logged, logged_pids, running, text_of, wait_for};
use serde_json::{Value, json};

#[tokio::test]
async fn per_session_children_are_capped() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 2
        max_connections_per_client = 2
        "#,
    )
    .await;
    let a = gw.session().await;
    let b = gw.session().await;
    let c = gw.session().await;
    for s in [&a, &b] {
        let r = s.call_tool("ps__echo", json!({"text": "ok"})).await;
        assert_eq!(text_of(&r.response), "ok");
    }
    let r = c.call_tool("ps__echo", json!({"text": "third"})).await;
    let msg = r.response["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        msg.contains("busy") && msg.contains("ps"),
        "{:?}",
        r.response
    );
    // One session ends: its child is stopped and the slot frees up.
    a.delete().await;
    let mut freed = false;
    for _ in 0..50 {
        let r = c.call_tool("ps__echo", json!({"text": "third"})).await;
        if r.response.get("result").is_some() {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "a slot frees up when a session ends");
    let pids = logged_pids(&gw.dir.path("ps.log"));
    assert!(
        pids.len() <= 4,
        "catalogue child + at most 3 per-session children: {pids:?}"
    );
}

#[test]
fn an_idle_timeout_below_the_session_ttl_is_refused() {
    let text = r#"
        [server]
        session_idle_timeout = "30m"
        [backends.ps]
        type = "stdio"
        command = "x"
        mode = "per_session"
        idle_timeout = "10m"
    "#;
    let problems = mcpgate::config::Config::parse(text, std::path::Path::new("t.toml"), &|_| None)
        .expect_err("an idle_timeout below the session TTL is a config problem");
    let p = problems
        .iter()
        .find(|p| p.path == "backends.ps.idle_timeout")
        .unwrap_or_else(|| panic!("{problems:?}"));
    assert!(
        p.message.contains("server.session_idle_timeout") && p.message.contains("30m"),
        "names the other setting and its value: {}",
        p.message
    );
    // Without idle_timeout (the default), the same config is valid: the
    // connection lives as long as its session.
    let default = text.replace("idle_timeout = \"10m\"", "");
    assert!(
        mcpgate::config::Config::parse(&default, std::path::Path::new("t.toml"), &|_| None).is_ok()
    );
}

/// PIDs of the fake children that received `method`.
fn pids_that_got(log: &std::path::Path, method: &str) -> Vec<u64> {
    logged(log, method)
        .iter()
        .filter_map(|e| e.get("pid").and_then(Value::as_u64))
        .collect()
}

#[tokio::test]
async fn a_replaced_per_session_connection_gets_the_sessions_state_again() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log", "--subscribe", "--exit-after-calls", "1"]
        mode = "per_session"
        "#,
    )
    .await;
    let log = gw.dir.path("ps.log");
    let mut s = gw.client();
    s.initialize(json!({})).await;
    let mut listen = s.get_stream().await;
    let r = s
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    let r = s
        .request("resources/subscribe", json!({"uri": "ps+fx://static"}))
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    let r = s.call_tool("ps__echo", json!({"text": "one"})).await;
    assert_eq!(text_of(&r.response), "one");
    let first = logged(&log, "resources/subscribe")[0]["pid"]
        .as_u64()
        .unwrap();
    // The child's second call kills it: the session's connection is lost.
    let r = s.call_tool("ps__echo", json!({"text": "two"})).await;
    assert!(r.response.get("error").is_some(), "{}", r.response);
    assert!(wait_for(Duration::from_secs(5), || gone(first as u32)).await);
    // The next call opens a new child, which gets the level and the
    // subscription before the call.
    let r = s
        .call_tool("ps__touch", json!({"uri": "fx://static"}))
        .await;
    assert_eq!(text_of(&r.response), "touched", "{}", r.response);
    let second = logged(&log, "tools/call").last().unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert_ne!(first, second, "a new child");
    assert!(
        pids_that_got(&log, "logging/setLevel").contains(&second),
        "the log level is set again on the new connection"
    );
    assert!(
        pids_that_got(&log, "resources/subscribe").contains(&second),
        "the subscription is made again on the new connection"
    );
    let note = listen.next(Duration::from_secs(5)).await;
    assert_eq!(
        note.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/resources/updated")),
        "the subscription still works: {note:?}"
    );
}

#[tokio::test]
async fn an_explicit_idle_timeout_spares_connections_holding_subscriptions() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        session_idle_timeout = "1s"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log", "--subscribe"]
        mode = "per_session"
        idle_timeout = "1s"
        [backends.other]
        type = "stdio"
        command = "${FAKE_STDIO}"
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
    let plain = gw.session().await;
    let r = plain.call_tool("ps__echo", json!({"text": "x"})).await;
    assert_eq!(text_of(&r.response), "x");
    let idle = logged(&log, "tools/call")[0]["pid"].as_u64().unwrap() as u32;
    assert_ne!(watching, idle);
    // Both sessions stay alive (they use another backend); neither uses `ps`.
    let end = tokio::time::Instant::now() + Duration::from_millis(2500);
    while tokio::time::Instant::now() < end {
        for s in [&watcher, &plain] {
            let r = s.call_tool("other__echo", json!({"text": "keep"})).await;
            assert_eq!(text_of(&r.response), "keep");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone(idle), "the idle connection without state was closed");
    assert!(running(watching), "the one holding a subscription was not");
    let r = plain.call_tool("ps__echo", json!({"text": "again"})).await;
    assert_eq!(text_of(&r.response), "again", "reopened on demand");
}
