//! JSON-RPC batches are refused on 2025-06-18+ sessions without forwarding
//! anything; on 2025-03-26 sessions they work, and `initialize` inside is refused
//! (with or without a session); a repeated request id is refused; a cancel in a
//! batch takes effect as a standalone one does; a batch runs at most 16 of its
//! requests at a time and holds at most 1,000 messages.

mod common;

use std::time::Duration;

use common::{TestGateway, logged_calls, read_log, wait_for};
use serde_json::{Value, json};
use tokio::time::Instant;

const FX: &str = r#"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--log", "${TEST_DIR}/fx.log"]
"#;

fn batch() -> String {
    json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "fx__echo", "arguments": {"text": "x"}}}
    ])
    .to_string()
}

#[tokio::test]
async fn batches_are_refused_on_modern_sessions_and_nothing_is_forwarded() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for body in [batch(), "[]".to_owned()] {
        let r = s.post(&[], body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"]["code"], -32600, "{body}");
    }
    let mut fresh = gw.client();
    fresh.version = Some("2025-11-25".into());
    let init = json!([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}]);
    let r = fresh.post(&[], init.to_string()).await;
    assert!(r.status.is_client_error(), "initialize in a batch: {r:?}");
    assert!(r.header("mcp-session-id").is_none());
    assert!(logged_calls(&gw.dir.path("fx.log"), "echo").is_empty());
}

#[tokio::test]
async fn batches_work_on_2025_03_26_sessions_without_initialize() {
    let gw = TestGateway::start(FX).await;
    let mut s = gw.client();
    s.initialize_version("2025-03-26", json!({})).await;
    assert_eq!(s.version.as_deref(), Some("2025-03-26"));
    let r = s.post(&[], batch()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(answers.len(), 2);
    let by_id = |id: i64| answers.iter().find(|a| a["id"] == id).unwrap();
    assert!(by_id(1)["result"]["tools"].is_array());
    assert_eq!(by_id(2)["result"]["content"][0]["text"], "x");

    let with_init = json!([
        {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}},
        {"jsonrpc": "2.0", "id": 8, "method": "ping"}
    ]);
    let r = s.post(&[], with_init.to_string()).await;
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    let init = answers.iter().find(|a| a["id"] == 7).unwrap();
    assert_eq!(init["error"]["code"], -32600, "{init}");
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 8 && a.get("result").is_some())
    );
}

/// 2025-03-26 basic/lifecycle: `initialize` MUST NOT be part of a batch. That is
/// the error, -32600, also without a session (not "Mcp-Session-Id required").
#[tokio::test]
async fn initialize_in_a_batch_without_a_session_is_told_it_cannot_be_batched() {
    let gw = TestGateway::start(FX).await;
    let c = gw.client();
    let init = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "x", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ]);
    let r = c.post(&[], init.to_string()).await;
    assert_eq!(r.status, 400, "{r:?}");
    let body = r.json();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("initialize must not be part of a batch"),
        "{body}"
    );
    assert!(r.header("mcp-session-id").is_none());
    assert_eq!(gw.gateway().session_count(), 0);
}

/// MCP basic/index: a request id is not reused within a session. In a batch
/// the later request with a repeated id gets -32600 and is not run; the first
/// is answered (as two concurrent POSTs with one id are: `request_ids.rs`).
#[tokio::test]
async fn a_repeated_id_in_a_batch_is_refused_and_the_first_runs_once() {
    let gw = TestGateway::start(FX).await;
    let mut s = gw.client();
    s.initialize_version("2025-03-26", json!({})).await;
    let echo = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {"text": text}}})
    };
    let body = json!([echo("a"), echo("b"), {"jsonrpc": "2.0", "id": 4, "method": "ping"}]);
    let r = s.post(&[], body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(answers.len(), 3, "{answers:?}");
    let threes: Vec<&Value> = answers.iter().filter(|a| a["id"] == 3).collect();
    assert_eq!(threes.len(), 2, "{answers:?}");
    assert!(
        threes
            .iter()
            .any(|a| a["result"]["content"][0]["text"] == "a"),
        "{answers:?}"
    );
    let refused = threes.iter().find(|a| a.get("error").is_some()).unwrap();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("repeated")),
        "{refused}"
    );
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 4 && a.get("result").is_some())
    );
    let calls = logged_calls(&gw.dir.path("fx.log"), "echo");
    assert_eq!(calls.len(), 1, "the repeated request is not forwarded");
}

fn cancelled_slow_tasks(log: &std::path::Path) -> usize {
    read_log(log)
        .iter()
        .filter(|e| e["event"] == "cancelled" && e["tool"] == "slow_task")
        .count()
}

/// MCP basic/utilities/cancellation: `notifications/cancelled` in a batch is
/// as effective as a standalone one, for a request of the same batch (no answer
/// follows for it) and for one in flight from an earlier POST, without waiting
/// for the batch's other requests.
#[tokio::test]
async fn a_cancel_in_a_batch_reaches_the_backend_for_its_own_or_an_earlier_request() {
    let gw = TestGateway::start(FX).await;
    let log = gw.dir.path("fx.log");
    let mut s = gw.client();
    s.initialize_version("2025-03-26", json!({})).await;
    let slow = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "fx__slow_task", "arguments": {"s": 30}}})
    };
    let cancel = |id: i64| {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "changed my mind"}})
    };

    // The same batch: the request is cancelled (upstream, or before it got
    // there), no answer is due.
    let r = s.post(&[], json!([slow(5), cancel(5)]).to_string()).await;
    assert_eq!(r.status, 202, "nothing to answer: {r:?}");
    let settled = || logged_calls(&log, "slow_task").len() == cancelled_slow_tasks(&log);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        wait_for(Duration::from_secs(3), settled).await,
        "no slow_task left running"
    );
    let (calls, cancels) = (
        logged_calls(&log, "slow_task").len(),
        cancelled_slow_tasks(&log),
    );

    // An earlier request: cancelled at once, not after the batch's other request.
    let mut stream = s.open(&slow(6)).await;
    assert!(
        wait_for(Duration::from_secs(3), || logged_calls(&log, "slow_task")
            .len()
            == calls + 1)
        .await
    );
    let delayed = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "fx__delay_echo", "arguments": {"ms": 2000, "tag": "d"}}});
    let batch = {
        let (s, body) = (s.clone(), json!([delayed, cancel(6)]).to_string());
        tokio::spawn(async move { s.post(&[], body).await })
    };
    assert!(
        wait_for(Duration::from_secs(1), || cancelled_slow_tasks(&log)
            == cancels + 1)
        .await,
        "the cancel did not wait for the batch's other request"
    );
    let r = batch.await.unwrap();
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["result"]["content"][0]["text"], "d");
    while let Some(m) = stream.next(Duration::from_millis(500)).await {
        assert_ne!(
            m.get("id"),
            Some(&json!(6)),
            "no answer for a cancelled request: {m}"
        );
    }
}

/// A batch's requests run at most 16 at a time (`http/mcp.rs`, `BATCH_CONCURRENCY`):
/// 48 calls of 300 ms take at least three rounds, and every answer comes back in
/// the one batch response.
#[tokio::test]
async fn a_batch_runs_at_most_16_requests_at_once_and_answers_every_one() {
    let gw = TestGateway::start(FX).await;
    let mut s = gw.client();
    s.initialize_version("2025-03-26", json!({})).await;
    let calls: Vec<Value> = (0..48)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "fx__delay_echo", "arguments": {"ms": 300, "tag": format!("t{i}")}}})
        })
        .collect();
    let started = Instant::now();
    let r = s.post(&[], Value::from(calls).to_string()).await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(answers.len(), 48);
    for i in 0..48 {
        let a = answers.iter().find(|a| a["id"] == i).unwrap();
        assert_eq!(a["result"]["content"][0]["text"], format!("t{i}"), "{a}");
    }
    assert!(
        took >= Duration::from_millis(900),
        "48 calls of 300 ms at most 16 at a time take 3 rounds, not {took:?}"
    );
}

/// A batch of more than 1,000 messages is refused whole: 400 with -32600 naming
/// the limit, nothing of it run; 1,000 are served.
#[tokio::test]
async fn a_batch_over_1000_messages_is_refused_whole() {
    let gw = TestGateway::start(FX).await;
    let log = gw.dir.path("fx.log");
    let mut s = gw.client();
    s.initialize_version("2025-03-26", json!({})).await;
    let echo = json!({"jsonrpc": "2.0", "id": "e", "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {"text": "x"}}});
    let mut items: Vec<Value> = (0..1000)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "ping"}))
        .collect();
    items.push(echo);
    let r = s.post(&[], Value::from(items.clone()).to_string()).await;
    assert_eq!(r.status, 400, "a batch of 1001 is not served");
    let v = r.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("1000"), "{message}");
    assert!(logged_calls(&log, "echo").is_empty(), "nothing of it ran");
    items.remove(0);
    let r = s.post(&[], Value::from(items).to_string()).await;
    assert_eq!(r.status, 200, "a batch of 1000 is served");
    let answers: Vec<Value> = serde_json::from_value(r.json()).unwrap();
    assert_eq!(answers.len(), 1000);
    assert_eq!(logged_calls(&log, "echo").len(), 1);
}
