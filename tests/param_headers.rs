//! `Mcp-Param-*` headers (MCP 2026-07-28 basic/transports/streamable-http,
//! "Custom Headers from Tool Parameters"; dual-era R7 and R18): a tool whose
//! `inputSchema` annotates arguments with `x-mcp-header` has them mirrored into
//! headers. A 2026-07-28 host's `tools/call` whose headers disagree with its
//! arguments is refused with 400 and -32020 before any backend sees it; a call
//! that agrees reaches a 2026-07-28 HTTP backend with the headers recomputed from
//! the backend's schema and the final arguments (a configured fixed value
//! included). A tool whose annotations break the rules is dropped from the
//! catalogue, as a client must. The backend is the fake HTTP server, dual-era.

mod common;

use common::{FakeHttp, FakeHttpOptions, McpClient, TestGateway, text_of};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

async fn setup() -> (FakeHttp, TestGateway) {
    let fx = FakeHttp::start(FakeHttpOptions {
        modern: true,
        ..FakeHttpOptions::default()
    })
    .await;
    fx.add_tool(
        json!({"name": "routed", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "tenant": {"type": "string", "x-mcp-header": "Tenant"},
        "query": {"type": "string"}}}}),
    );
    fx.add_tool(
        json!({"name": "misannotated", "inputSchema": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "x-mcp-header": "Tag"}}}}}),
    );
    let gw = TestGateway::start(&format!(
        "[backends.fx]\ntype = \"http\"\nurl = \"{}\"\nera = \"modern\"\n\
         [backends.fx.tools.overrides.routed]\narguments = {{ tenant = \"acme\" }}\n",
        fx.url
    ))
    .await;
    (fx, gw)
}

/// A 2026-07-28 `tools/call` of `fx__routed` with `args`, its standard headers
/// plus `extra`; the raw answer (status, JSON body).
async fn call(c: &McpClient, args: Value, extra: &[(&str, &str)]) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": c.next_id(), "method": "tools/call",
        "params": {"name": "fx__routed", "arguments": args, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut h = vec![
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "fx__routed"),
        ("accept", "application/json, text/event-stream"),
    ];
    h.extend_from_slice(extra);
    let raw = c.post(&h, body.to_string()).await;
    let text = String::from_utf8_lossy(&raw.body).into_owned();
    // A JSON answer, or the last `data:` line of an SSE one.
    let json = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .next_back()
            .unwrap_or(Value::Null)
    });
    (raw.status.as_u16(), json)
}

#[tokio::test]
async fn disagreeing_headers_are_refused_before_the_backend() {
    let (fx, gw) = setup().await;
    let c = gw.client();
    let args = json!({"region": "eu-west", "priority": 3, "query": "q"});
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            "missing",
            vec![("mcp-param-priority", "3")],
            "Mcp-Param-Region is required",
        ),
        (
            "different",
            vec![("mcp-param-region", "us-east"), ("mcp-param-priority", "3")],
            "\"us-east\"",
        ),
        (
            "not a number",
            vec![
                ("mcp-param-region", "eu-west"),
                ("mcp-param-priority", "three"),
            ],
            "Priority",
        ),
        (
            "bad base64",
            vec![
                ("mcp-param-region", "=?base64?%%%?="),
                ("mcp-param-priority", "3"),
            ],
            "malformed",
        ),
    ];
    for (what, headers, says) in cases {
        let (status, body) = call(&c, args.clone(), &headers).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"]["code"], -32020, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {message}");
        assert!(body["id"].is_number(), "{what}: the id is echoed: {body}");
    }
    assert!(
        fx.calls("tools/call").is_empty(),
        "no refused call reached the backend"
    );
}

#[tokio::test]
async fn agreeing_headers_pass_and_the_backend_gets_its_own() {
    let (fx, gw) = setup().await;
    let c = gw.client();
    // Numbers compare numerically, base64 is decoded, a null argument expects no
    // header, and headers no annotation names are ignored.
    let args = json!({"region": "zürich", "priority": 3, "query": "q"});
    let zurich = format!(
        "=?base64?{}?=",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "zürich")
    );
    let headers = [
        ("mcp-param-region", zurich.as_str()),
        ("mcp-param-priority", "3.0"),
        ("mcp-param-unrelated", "whatever"),
    ];
    let (status, body) = call(&c, args, &headers).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(text_of(&body), "called routed", "{body}");
    let (status, body) = call(
        &c,
        json!({"region": null, "priority": 1}),
        &[("mcp-param-priority", "1")],
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let calls = fx.calls("tools/call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    let first = &calls[0];
    assert_eq!(
        first.header("mcp-name"),
        Some("routed"),
        "the backend's name"
    );
    assert_eq!(first.header("mcp-param-region"), Some(zurich.as_str()));
    assert_eq!(first.header("mcp-param-priority"), Some("3"));
    assert_eq!(
        first.header("mcp-param-tenant"),
        Some("acme"),
        "the fixed value the host never sees is mirrored too"
    );
    assert_eq!(
        first.header("mcp-param-unrelated"),
        None,
        "host headers are not passed on"
    );
    let second = &calls[1];
    assert_eq!(second.header("mcp-param-region"), None, "null: no header");
    assert_eq!(second.header("mcp-param-priority"), Some("1"));
}

#[tokio::test]
async fn a_tool_with_invalid_annotations_is_not_exposed() {
    let (_fx, gw) = setup().await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"fx__routed"), "{names:?}");
    assert!(!names.contains(&"fx__misannotated"), "{names:?}");
    let routed = tools.iter().find(|t| t["name"] == "fx__routed").unwrap();
    assert_eq!(
        routed["inputSchema"]["properties"]["region"]["x-mcp-header"], "Region",
        "annotations are exposed for hosts to mirror: {routed}"
    );
    assert!(
        routed["inputSchema"]["properties"].get("tenant").is_none(),
        "a fixed argument is not exposed"
    );
    // A legacy host's call is not checked (no such headers in its revision).
    let r = s.call_tool("fx__routed", json!({"region": "eu"})).await;
    assert_eq!(text_of(&r.response), "called routed", "{}", r.response);
}
