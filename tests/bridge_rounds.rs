//! A 2026-07-28 host through a legacy backend that asks several things at once
//! (the built-in demo as a legacy backend, its
//! `test_input_required_result_multiple_inputs` sends elicitation, sampling and
//! roots requests together): one `input_required` round carries all three, and
//! the retry answering all of them completes the call, never an empty round.

mod common;

use std::time::Duration;

use common::{McpClient, TestGateway};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
const TOOL: &str = "test_input_required_result_multiple_inputs";

async fn call(c: &McpClient, extra: &Value) -> Value {
    let mut params = json!({"name": TOOL, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities":
            {"elicitation": {}, "sampling": {}, "roots": {}}}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body =
        json!({"jsonrpc": "2.0", "id": c.next_id(), "method": "tools/call", "params": params});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", TOOL),
    ];
    let mut stream = c.open_with(&h, &body).await;
    let mut last = Value::Null;
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        last = m;
    }
    last
}

/// The host's answer to one input request.
fn answer(request: &Value) -> Value {
    match request["method"].as_str() {
        Some("elicitation/create") => json!({"action": "accept", "content": {"name": "Ada"}}),
        Some("sampling/createMessage") => json!({"role": "assistant",
            "content": {"type": "text", "text": "Hi"}, "model": "m"}),
        _ => json!({"roots": [{"uri": "file:///r", "name": "r"}]}),
    }
}

#[tokio::test]
async fn one_round_for_all_asks_and_its_answers_complete_the_call() {
    let gw = TestGateway::start(&format!(
        "[backends.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-server\"]\nprefix = \"\"\nmode = \"per_session\"\nera = \"legacy\"\n",
        env!("CARGO_BIN_EXE_mcpgate")
    ))
    .await;
    let c = gw.client();
    let first = call(&c, &json!({})).await;
    let r = &first["result"];
    assert_eq!(r["resultType"], "input_required", "{first}");
    let asked = r["inputRequests"].as_object().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 3, "one round for all three: {first}");
    let responses: serde_json::Map<String, Value> =
        asked.iter().map(|(k, v)| (k.clone(), answer(v))).collect();
    let retry = json!({"requestState": r["requestState"], "inputResponses": responses});
    let done = call(&c, &retry).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Hi Ada! Roots: file:///r",
        "{done}"
    );
}
