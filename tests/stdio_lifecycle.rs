//! stdio backends failing and stopping, so that a dead child never hangs a request
//! and is never left orphaned: a child that exits or is killed mid-call fails that
//! call fast with an error naming the backend and is restarted; a child that crashes on start does
//! not hold anything up; noise on stdout is skipped; strict servers get
//! `initialized` before anything else.

mod common;

use std::time::Duration;

use common::{
    FX, FX_LOGGED, McpClient, TestGateway, logged_calls, names, read_log, text_of, wait_for,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::time::Instant;

fn assert_backend_error(r: &common::Rpc, backend: &str) {
    assert!(
        r.error_code().is_some(),
        "a JSON-RPC error, not a result: {}",
        r.response
    );
    let e = &r.response["error"];
    let named = e["data"]["backend"] == backend
        || e["message"].as_str().is_some_and(|m| m.contains(backend));
    assert!(named, "error names backend {backend}: {e}");
}

async fn eventually_echoes(s: &McpClient, tool: &str) -> bool {
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        let r = s.call_tool(tool, json!({"text": "back"})).await;
        if r.response.pointer("/result/content/0/text") == Some(&json!("back")) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_child_exiting_mid_call_fails_fast_and_is_restarted() {
    let gw = TestGateway::start(
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--exit-after-calls", "1", "--log", "${TEST_DIR}/fx.log"]
        [backends.other]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let s = gw.session().await;
    assert_eq!(
        text_of(&s.call_tool("fx__echo", json!({"text": "1"})).await.response),
        "1"
    );
    let started = Instant::now();
    let r = s.call_tool("fx__echo", json!({"text": "2"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "fast: {:?}",
        started.elapsed()
    );
    assert_backend_error(&r, "fx");
    assert_eq!(
        text_of(
            &s.call_tool("other__echo", json!({"text": "o"}))
                .await
                .response
        ),
        "o"
    );
    assert!(eventually_echoes(&s, "fx__echo").await, "restarted");
}

#[tokio::test]
async fn a_killed_child_fails_the_in_flight_call_fast() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let call = {
        let s = s.clone();
        tokio::spawn(async move { s.call_tool("fx__sleep", json!({"s": 30})).await })
    };
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "sleep")
            .is_empty())
        .await
    );
    let pid = logged_calls(&log, "sleep")[0]["pid"].as_u64().unwrap();
    let killed = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let r = call.await.unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
    assert_backend_error(&r, "fx");
    assert!(eventually_echoes(&s, "fx__echo").await, "restarted");
}

#[tokio::test]
async fn a_child_crashing_on_start_does_not_hold_up_the_others() {
    let started = Instant::now();
    let gw = TestGateway::start(
        r#"
        [backends.crash]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--crash-on-start"]
        [backends.ok]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(tools.contains(&"ok__echo".to_owned()));
    assert!(!tools.iter().any(|t| t.starts_with("crash__")), "{tools:?}");
    let t = Instant::now();
    let r = s.call_tool("crash__echo", json!({"text": "x"})).await;
    assert!(r.error_code().is_some(), "{}", r.response);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(
        text_of(&s.call_tool("ok__echo", json!({"text": "y"})).await.response),
        "y"
    );
}

#[tokio::test]
async fn non_json_stdout_is_skipped_and_strict_init_is_respected() {
    let gw = TestGateway::start(
        r#"
        [backends.noisy]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--noise"]
        [backends.strict]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--strict-init", "--log", "${TEST_DIR}/strict.log"]
        # The legacy lifecycle: nothing before initialize (era "auto" sends its
        # server/discover probe first; tests/backend_era.rs).
        era = "legacy"
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert_eq!(
        tools.iter().filter(|t| t.starts_with("noisy__")).count(),
        14
    );
    assert_eq!(
        tools.iter().filter(|t| t.starts_with("strict__")).count(),
        14
    );
    assert_eq!(
        text_of(
            &s.call_tool("noisy__echo", json!({"text": "n"}))
                .await
                .response
        ),
        "n"
    );
    assert_eq!(
        text_of(
            &s.call_tool("strict__echo", json!({"text": "s"}))
                .await
                .response
        ),
        "s"
    );
    let ignored = read_log(&gw.dir.path("strict.log"))
        .into_iter()
        .filter(|e| e["event"] == "ignored before initialized")
        .count();
    assert_eq!(ignored, 0, "nothing sent before notifications/initialized");
}

#[tokio::test]
async fn stderr_floods_do_not_block_the_child() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let r = s
        .call_tool("fx__spam_stderr", json!({"bytes": 2_000_000}))
        .await;
    assert_eq!(text_of(&r.response), "spammed");
    let r = s.call_tool("fx__big", json!({"bytes": 3_000_000})).await;
    assert_eq!(text_of(&r.response).len(), 3_000_000);
}

#[tokio::test]
async fn an_unreachable_http_backend_fails_calls_fast_and_names_itself() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let gw = TestGateway::start(&format!(
        r#"
        [backends.down]
        type = "http"
        url = "http://127.0.0.1:{port}/mcp"
        mode = "shared"
        [backends.up]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        "#
    ))
    .await;
    let s = gw.session().await;
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"up__echo".to_owned()));
    let t = Instant::now();
    let r = s
        .request("resources/read", json!({"uri": "down+fx://static"}))
        .await;
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_backend_error(&r, "down");
}
