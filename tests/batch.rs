//! JSON-RPC batches are refused on 2025-06-18+ sessions without forwarding
//! anything; on 2025-03-26 sessions they work, and `initialize` inside is refused.

mod common;

use common::{TestGateway, logged_calls};
use serde_json::{Value, json};

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
