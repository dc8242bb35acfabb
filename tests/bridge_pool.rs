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
    call_as(c, "ask__ask_elicit", &json!({"elicitation": {}}), extra)
}

/// A `tools/call` of `tool` from a 2026-07-28 host declaring `caps`, with `extra` params.
fn call_as(
    c: &McpClient,
    tool: &'static str,
    caps: &Value,
    extra: &Value,
) -> (Value, [(&'static str, &'static str); 3]) {
    let mut params = json!({"name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body =
        json!({"jsonrpc": "2.0", "id": c.next_id(), "method": "tools/call", "params": params});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    (body, h)
}

/// The last message of the answer to one `tools/call` of `ask__ask_elicit`.
async fn ask(c: &McpClient, extra: &Value) -> Value {
    last_of(c, call(c, extra)).await
}

/// The last message of the answer to one request.
async fn last_of(c: &McpClient, (body, h): (Value, [(&str, &str); 3])) -> Value {
    let mut stream = c.open_with(&h, &body).await;
    let mut last = Value::Null;
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        last = m;
    }
    last
}

/// The retry of a round: its state and an answer to its one request.
fn retry(round: &Value) -> Value {
    retry_with(round, &json!({"action": "accept", "content": {"x": 1}}))
}

/// The retry of a round answering its one request with `answer`.
fn retry_with(round: &Value, answer: &Value) -> Value {
    let r = &round["result"];
    let key = r["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_default();
    json!({
        "requestState": r["requestState"],
        "inputResponses": { key: answer }
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

/// A backend may keep the roots it was told for the rest of its session, so the
/// pooled connection that carried one host's roots serves no later request: the
/// next call (same key) gets a new child, while calls before it shared one.
#[tokio::test]
async fn a_pooled_connection_told_a_hosts_roots_serves_no_other_call() {
    let gw = TestGateway::start(
        "[backends.ask]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\nargs = [\"--log\", \"${TEST_DIR}/ask.log\"]\nmode = \"per_session\"\nera = \"legacy\"\n",
    )
    .await;
    let c = gw.client();
    let caps = json!({"elicitation": {}, "roots": {}});
    let round_trip = |tool: &'static str, answer: Value| {
        let (c, caps) = (&c, &caps);
        async move {
            let round = last_of(c, call_as(c, tool, caps, &json!({}))).await;
            assert_eq!(round["result"]["resultType"], "input_required", "{round}");
            let done = last_of(c, call_as(c, tool, caps, &retry_with(&round, &answer))).await;
            assert_eq!(done["result"]["resultType"], "complete", "{done}");
            assert!(done["result"]["isError"] != true, "{done}");
        }
    };
    let form = json!({"action": "accept", "content": {"x": 1}});
    let pids = || logged_pids(&gw.dir.path("ask.log")).len();
    round_trip("ask__ask_elicit", form.clone()).await;
    round_trip("ask__ask_elicit", form.clone()).await;
    assert_eq!(
        pids(),
        2,
        "the catalogue's child and one pooled child, reused"
    );
    round_trip(
        "ask__ask_roots",
        json!({"roots": [{"uri": "file:///a", "name": "a"}]}),
    )
    .await;
    assert_eq!(pids(), 2, "the roots call ran on the same pooled child");
    round_trip("ask__ask_elicit", form).await;
    assert_eq!(pids(), 3, "after the roots, a new pooled child");
}
