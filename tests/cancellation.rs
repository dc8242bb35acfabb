//! Cancellation and timeouts: host cancellation reaches the backend with the
//! upstream id and suppresses the result; unknown cancels are ignored; a backend
//! that never answers times out per backend with a JSON-RPC error and an upstream
//! cancel.

mod common;

use std::time::Duration;

use common::{FX_LOGGED, TestGateway, logged, logged_calls, text_of, wait_for};
use serde_json::{Value, json};
use tokio::time::Instant;

#[tokio::test]
async fn host_cancel_reaches_the_backend_and_no_result_follows() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
                      "params": {"name": "fx__slow_task", "arguments": {"s": 30}}});
    let mut stream = s.open(&call).await;
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "slow_task")
            .is_empty())
        .await
    );
    let upstream = logged_calls(&log, "slow_task")[0]["msg"]["id"].clone();

    let r = s
        .notify(
            "notifications/cancelled",
            Some(json!({"requestId": 42, "reason": "user aborted"})),
        )
        .await;
    assert_eq!(r.status, 202);
    let cancelled_upstream = || {
        logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(wait_for(Duration::from_secs(2), cancelled_upstream).await);
    let recorded = || {
        common::read_log(&log)
            .iter()
            .any(|e| e["event"] == "cancelled" && e["tool"] == "slow_task")
    };
    assert!(
        wait_for(Duration::from_secs(2), recorded).await,
        "fx-stdio saw it for its request"
    );
    while let Some(m) = stream.next(Duration::from_secs(2)).await {
        assert_ne!(
            m.get("id"),
            Some(&json!(42)),
            "no result for a cancelled request: {m}"
        );
    }

    for unknown in [json!(999), json!("nope"), json!(0)] {
        let r = s
            .notify(
                "notifications/cancelled",
                Some(json!({ "requestId": unknown })),
            )
            .await;
        assert_eq!(r.status, 202);
    }
    assert_eq!(
        text_of(
            &s.call_tool("fx__echo", json!({"text": "ok"}))
                .await
                .response
        ),
        "ok"
    );
}

#[tokio::test]
async fn a_backend_that_never_answers_times_out_with_an_upstream_cancel() {
    let gw = TestGateway::start(
        r#"
        [backends.slow]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/slow.log", "--never-answer", "echo"]
        timeout = "500ms"
        [backends.fast]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let log = gw.dir.path("slow.log");
    let s = gw.session().await;
    let started = Instant::now();
    let r = s.call_tool("slow__echo", json!({"text": "x"})).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450),
        "timeout is the backend's: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(r.error_code().is_some(), "a JSON-RPC error: {}", r.response);
    assert_eq!(
        r.response["error"]["data"]["backend"], "slow",
        "{}",
        r.response
    );
    let upstream: Value = logged_calls(&log, "echo")[0]["msg"]["id"].clone();
    let cancelled = || {
        logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(wait_for(Duration::from_secs(2), cancelled).await);
    // Other tools of the same backend and other backends still work.
    let r = s
        .call_tool("slow__delay_echo", json!({"ms": 1, "tag": "t"}))
        .await;
    assert_eq!(text_of(&r.response), "t");
    assert_eq!(
        text_of(
            &s.call_tool("fast__echo", json!({"text": "f"}))
                .await
                .response
        ),
        "f"
    );
}

#[tokio::test]
async fn server_request_timeout_applies_when_the_backend_sets_none() {
    let gw = TestGateway::start(
        r#"
        [server]
        request_timeout = "400ms"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let s = gw.session().await;
    let started = Instant::now();
    let r = s.call_tool("fx__sleep", json!({"s": 5})).await;
    assert!(r.error_code().is_some(), "{}", r.response);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_cancel_while_the_backend_starts_is_not_lost() {
    let gw = TestGateway::start(
        r#"
        [backends.lazy]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--start-delay-ms", "400", "--log", "${TEST_DIR}/lazy.log"]
        mode = "per_session"
        "#,
    )
    .await;
    let log = gw.dir.path("lazy.log");
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "lazy__slow_task", "arguments": {"s": 3}}});
    // The per-session child is still starting when the answer switches to SSE.
    let mut stream = s.open(&call).await;
    let r = s
        .notify("notifications/cancelled", Some(json!({"requestId": 7})))
        .await;
    assert_eq!(r.status, 202);
    assert!(
        stream.ends_within(Duration::from_millis(1500)).await,
        "the cancelled request's stream ends without waiting for the backend"
    );
    // The session's own child comes up (second initialized) ...
    let initialized = || logged(&log, "notifications/initialized").len() >= 2;
    assert!(wait_for(Duration::from_secs(3), initialized).await);
    // ... and then either never sees the call or sees it cancelled.
    let settled = || match logged_calls(&log, "slow_task").first() {
        None => false,
        Some(c) => logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == c["msg"]["id"]),
    };
    let seen = wait_for(Duration::from_millis(500), settled).await;
    assert!(
        seen || logged_calls(&log, "slow_task").is_empty(),
        "the backend runs a cancelled call with no notifications/cancelled: {:?}",
        common::read_log(&log)
    );
}

#[tokio::test]
async fn a_host_disconnect_is_not_a_cancellation() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "fx__slow_task", "arguments": {"s": 0.6}}});
    let stream = s.open(&call).await;
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "slow_task")
            .is_empty())
        .await
    );
    let upstream = logged_calls(&log, "slow_task")[0]["msg"]["id"].clone();
    drop(stream);
    let answered = || {
        common::read_log(&log)
            .iter()
            .any(|e| e["event"] == "answered" && e["id"] == upstream)
    };
    assert!(
        wait_for(Duration::from_secs(3), answered).await,
        "the call ran to completion"
    );
    assert!(logged(&log, "notifications/cancelled").is_empty());
    assert_eq!(
        text_of(
            &s.call_tool("fx__echo", json!({"text": "ok"}))
                .await
                .response
        ),
        "ok"
    );
}

/// A DELETE of the session while one of its calls streams: the host gets a
/// JSON-RPC error for its pending id on that stream before it ends (a request is
/// answered, MCP 2025-11-25 basic: every request gets a response), and the
/// backend gets `notifications/cancelled` for its request.
#[tokio::test]
async fn delete_while_a_call_streams_answers_it_with_an_error_and_cancels_upstream() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": "pending-7", "method": "tools/call",
                      "params": {"name": "fx__slow_task", "arguments": {"s": 30}}});
    let mut stream = s.open(&call).await;
    assert!(stream.is_sse());
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "slow_task")
            .is_empty())
        .await
    );
    let upstream = logged_calls(&log, "slow_task")[0]["msg"]["id"].clone();
    assert_eq!(s.delete().await.status, 200);
    let mut answer = None;
    while let Some(m) = stream.next(Duration::from_secs(3)).await {
        if m.get("method").is_none() {
            answer = Some(m);
            break;
        }
    }
    let answer = answer.expect("an answer for the pending id before the stream ends");
    assert_eq!(answer["id"], "pending-7", "{answer}");
    assert!(answer["error"]["code"].is_i64(), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("session"), "{message}");
    assert!(stream.ends_within(Duration::from_secs(3)).await);
    let cancelled = || {
        logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(wait_for(Duration::from_secs(3), cancelled).await);
}
