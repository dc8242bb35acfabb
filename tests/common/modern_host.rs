//! A 2026-07-28 ("modern") host's requests, for tests of the stateless face:
//! the per-request `_meta` envelope, the standard headers mirroring the body
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), and the answer read whether
//! it comes as JSON or as an SSE stream (MCP 2026-07-28 basic/index,
//! basic/transports/streamable-http).

use std::time::Duration;

use serde_json::{Value, json};

use super::{McpClient, Raw};

/// The revision a modern host speaks.
pub const MODERN: &str = "2026-07-28";

/// The `_meta` envelope: revision, no client capabilities, a client name.
pub fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"}
    })
}

/// A modern request: the body with `_meta`, and the standard headers mirroring it.
#[allow(clippy::needless_pass_by_value)] // call sites read better with owned ids
pub fn modern(id: Value, method: &str, mut params: Value) -> (Value, Vec<(String, String)>) {
    params["_meta"] = envelope();
    let mut headers = vec![
        ("mcp-protocol-version".to_owned(), MODERN.to_owned()),
        ("mcp-method".to_owned(), method.to_owned()),
    ];
    let name = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str);
    if let Some(n) = name {
        headers.push(("mcp-name".to_owned(), n.to_owned()));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    (body, headers)
}

/// POSTs a modern request with its headers; the raw answer.
pub async fn send(c: &McpClient, body: &Value, headers: &[(String, String)]) -> Raw {
    let extra: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    c.post(&extra, body.to_string()).await
}

/// A modern request declaring `caps`, as (body, headers).
pub fn modern_with(
    id: Value,
    method: &str,
    params: Value,
    caps: Value,
) -> (Value, Vec<(String, String)>) {
    let (mut body, h) = modern(id, method, params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps;
    (body, h)
}

/// The answer to a modern request, whether JSON or an SSE stream (its last
/// message).
pub async fn answer(c: &McpClient, body: &Value, h: &[(String, String)]) -> Value {
    let extra: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut stream = c.open_with(&extra, body).await;
    let mut last = Value::Null;
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        assert!(
            m.get("method").is_none() || m.get("id").is_none(),
            "never a request on a modern stream: {m}"
        );
        last = m;
    }
    last
}
