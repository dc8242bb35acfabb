//! Per-session connections stay bounded (a field failure elsewhere: per-session
//! spawning let the process count grow without bound): at most `max_connections`
//! at once, and idle ones are closed after `idle_timeout` and reopened on demand.

mod common;

use std::time::Duration;

use common::{TestGateway, gone, logged_pids, text_of, wait_for};
use serde_json::json;

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

#[tokio::test]
async fn idle_per_session_children_are_closed_and_reopened() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        session_idle_timeout = "60s"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        idle_timeout = "300ms"
        "#,
    )
    .await;
    let s = gw.session().await;
    let before = logged_pids(&gw.dir.path("ps.log"));
    let r = s.call_tool("ps__echo", json!({"text": "one"})).await;
    assert_eq!(text_of(&r.response), "one");
    let first: Vec<u32> = logged_pids(&gw.dir.path("ps.log"))
        .difference(&before)
        .copied()
        .collect();
    assert_eq!(first.len(), 1, "one per-session child");
    // Keep the session alive while its connection idles.
    assert!(
        wait_for(Duration::from_secs(5), || gone(first[0])).await,
        "the idle per-session child was stopped"
    );
    let _ = s.request("ping", json!({})).await;
    let r = s.call_tool("ps__echo", json!({"text": "two"})).await;
    assert_eq!(text_of(&r.response), "two", "reopened on demand");
}
