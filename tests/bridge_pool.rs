//! 2026-07-28 hosts through a legacy stdio backend in `per_session` mode: their
//! requests are served by pooled backend connections, and a child on a pipe
//! cannot say which call a server→client request belongs to. So a pooled stdio
//! connection serves one call at a time: a call parked in a bridge continuation
//! keeps its child, and another modern call that asks gets a sibling child and
//! its own `input_required` round (not "cannot tell which client"); both retries
//! complete, each on its own child.

mod common;

use std::time::Duration;

use common::{McpClient, TestGateway, logged_pids};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

fn call(c: &McpClient, extra: &Value) -> (Value, [(&'static str, &'static str); 3]) {
    let mut params = json!({"name": "ask__ask_elicit", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body =
        json!({"jsonrpc": "2.0", "id": c.next_id(), "method": "tools/call", "params": params});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "ask__ask_elicit"),
    ];
    (body, h)
}

/// The last message of the answer to one `tools/call` of `ask__ask_elicit`.
async fn ask(c: &McpClient, extra: &Value) -> Value {
    let (body, h) = call(c, extra);
    let mut stream = c.open_with(&h, &body).await;
    let mut last = Value::Null;
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        last = m;
    }
    last
}

/// The retry of a round: its state and an answer to its one request.
fn retry(round: &Value) -> Value {
    let r = &round["result"];
    let key = r["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    json!({
        "requestState": r["requestState"],
        "inputResponses": { key: {"action": "accept", "content": {"x": 1}} }
    })
}

#[tokio::test]
async fn a_parked_call_keeps_its_child_and_another_asking_call_gets_its_own() {
    let gw = TestGateway::start(
        "[backends.ask]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\nargs = [\"--log\", \"${TEST_DIR}/ask.log\"]\nmode = \"per_session\"\nera = \"legacy\"\n",
    )
    .await;
    let c = gw.client();
    let first = ask(&c, &json!({})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let second = ask(&c, &json!({})).await;
    assert_eq!(
        second["result"]["resultType"], "input_required",
        "the second call is asked too, while the first is parked: {second}"
    );
    for (what, round) in [("second", &second), ("first", &first)] {
        let done = ask(&c, &retry(round)).await;
        assert_eq!(done["result"]["resultType"], "complete", "{what}: {done}");
        assert!(
            done["result"]["isError"] != true,
            "{what}: the backend got its answer: {done}"
        );
    }
    // The catalogue's child and one pooled child per parked call.
    assert_eq!(logged_pids(&gw.dir.path("ask.log")).len(), 3);
}
