//! Draining on SIGTERM, with the real `mcpgate serve` process: load balancers
//! need a window to take the replica out, so `/readyz` turns 503 at once while
//! `/healthz` stays 200 and the listener keeps serving (in-flight streams, and
//! the requests of existing sessions) for `server.drain_delay`; new sessions are
//! refused with 503 + `Retry-After`; calls still running when
//! `server.shutdown_grace` ends get a JSON-RPC error on their stream, not a cut;
//! and an HTTP backend hears `notifications/cancelled` before the session's
//! `DELETE`.

mod common;

use std::time::Duration;

use common::served::Served;
use common::{FakeHttp, McpClient, text_of};
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use serde_json::json;
use tokio::time::Instant;

async fn status_of(url: &str) -> Result<StatusCode, String> {
    reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn sigterm_turns_readyz_503_keeps_serving_and_refuses_new_sessions() {
    let mut gw = Served::start(
        r#"
        [server]
        listen = "127.0.0.1:0"
        metrics_listen = "off"
        drain_delay = "2s"
        shutdown_grace = "6s"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    assert_eq!(
        status_of(&format!("{}/readyz", gw.base)).await,
        Ok(StatusCode::OK)
    );
    let slow = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "fx__sleep", "arguments": {"s": 1.5}}});
    let mut stream = s.open(&slow).await;

    let term = Instant::now();
    gw.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        status_of(&format!("{}/readyz", gw.base)).await,
        Ok(StatusCode::SERVICE_UNAVAILABLE),
        "readyz while draining\n{}",
        gw.log()
    );
    let readyz = reqwest::get(format!("{}/readyz", gw.base)).await.unwrap();
    assert_eq!(
        readyz.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "every 503 says when to ask again"
    );
    assert_eq!(
        status_of(&format!("{}/healthz", gw.base)).await,
        Ok(StatusCode::OK),
        "healthz while draining"
    );
    // A new session is refused, with a hint when to retry (elsewhere).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "late", "version": "0"}}});
    let refused = McpClient::new(&gw.url).post(&[], init.to_string()).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    // The existing session is still served, on a new connection too.
    let mut fresh = McpClient::new(&gw.url);
    fresh.session = s.session.clone();
    fresh.version = s.version.clone();
    assert_eq!(
        text_of(
            &fresh
                .call_tool("fx__echo", json!({"text": "still"}))
                .await
                .response
        ),
        "still"
    );
    // The in-flight stream finishes with its result.
    let response = loop {
        let m = stream
            .next(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("stream ended without its response\n{}", gw.log()));
        if m.get("id").is_some() {
            break m;
        }
    };
    assert_eq!(response["id"], 5);
    assert_eq!(text_of(&response), "slept", "{response}");
    // Serving for the whole drain delay, then gone.
    let code = gw.exit_code(Duration::from_secs(8)).await;
    assert_eq!(code, Some(0), "exit after SIGTERM\n{}", gw.log());
    let took = term.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "exited {took:?} after SIGTERM (drain_delay 2s)"
    );
}

#[tokio::test]
async fn calls_still_running_when_the_grace_ends_get_an_error_and_the_backend_a_cancel_before_delete()
 {
    let fx = FakeHttp::default_started().await;
    let mut gw = Served::start(&format!(
        r#"
        [server]
        listen = "127.0.0.1:0"
        metrics_listen = "off"
        shutdown_grace = "1s"
        [backends.web]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "web__slow_progress", "arguments": {"n": 300, "interval_ms": 100}}});
    let mut stream = s.open(&call).await;
    let end = Instant::now() + Duration::from_secs(3);
    while fx.calls("tools/call").is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let upstream = fx.calls("tools/call");
    assert_eq!(upstream.len(), 1, "the call reached the backend");
    let upstream_id = upstream[0].body.as_ref().unwrap()["id"].clone();
    let backend_session = upstream[0].header("mcp-session-id").unwrap().to_owned();

    gw.signal(Signal::SIGTERM);
    let response = loop {
        let m = stream
            .next(Duration::from_secs(4))
            .await
            .unwrap_or_else(|| panic!("the stream was cut without an answer\n{}", gw.log()));
        if m.get("id").is_some() {
            break m;
        }
    };
    assert_eq!(response["id"], 77, "{response}");
    assert!(response.get("error").is_some(), "{response}");
    assert_eq!(
        gw.exit_code(Duration::from_secs(8)).await,
        Some(0),
        "{}",
        gw.log()
    );

    // What the backend saw for that session, in order.
    let seen: Vec<String> = fx
        .log()
        .into_iter()
        .filter(|r| r.header("mcp-session-id") == Some(backend_session.as_str()))
        .map(|r| match r.rpc_method() {
            Some("notifications/cancelled") => {
                let id = &r.body.as_ref().unwrap()["params"]["requestId"];
                format!("cancel {id}")
            }
            Some(m) => m.to_owned(),
            None => r.http_method.clone(),
        })
        .collect();
    let cancel = seen
        .iter()
        .position(|m| *m == format!("cancel {upstream_id}"));
    let delete = seen.iter().position(|m| m == "DELETE");
    assert!(
        matches!((cancel, delete), (Some(c), Some(d)) if c < d),
        "cancel of {upstream_id} before DELETE: {seen:?}"
    );
}
