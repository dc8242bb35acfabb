//! Rewriting backend answers for hosts: resource URIs inside results get the
//! backend's URI prefix so a host that follows a `resource_link` or embedded
//! resource reaches the same backend again, ids minted by the backend get its
//! namespace, and fields a host's revision does not know are removed (MCP
//! 2025-11-25 checklist §8.10; the revision rules are in `mcp::version`).

use crate::jsonrpc::{ErrorObject, RawJson};
use serde_json::Value;

use crate::mcp::ProtocolVersion;
use crate::mcp::marks::Marks;
use crate::mcp::names;
use crate::mcp::version;

/// Which result shape to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultKind {
    /// `CallToolResult`: `content[]` blocks, `_meta.ui.resourceUri`.
    ToolCall,
    /// `GetPromptResult`: `messages[].content`.
    Prompt,
    /// `ReadResourceResult`: `contents[].uri`.
    Resource,
    /// Nothing to rewrite.
    Opaque,
}

/// Rewrites a backend result for a host. Returns the input untouched (no parse)
/// when nothing can need rewriting. `marks`: the keys `raw`'s text shows
/// ([`Marks::of`]).
pub fn rewrite_result(
    raw: RawJson,
    kind: ResultKind,
    uri_prefix: &str,
    host: ProtocolVersion,
    marks: Marks,
) -> RawJson {
    let needs_uris = !uri_prefix.is_empty()
        && kind != ResultKind::Opaque
        // Both keys rewritten, `"uri"` and `"resourceUri"`, end in `ri"` (a
        // string ending so elsewhere only costs a parse).
        && marks.uri();
    let needs_downgrade = matches!(kind, ResultKind::ToolCall | ResultKind::Prompt)
        && version::result_needs_downgrade(host, raw.as_bytes());
    if !needs_uris && !needs_downgrade {
        return raw;
    }
    let Ok(mut v) = raw.parse::<Value>() else {
        return raw;
    };
    if needs_uris {
        match kind {
            ResultKind::ToolCall => {
                for block in array_mut(&mut v, "content") {
                    prefix_block(block, uri_prefix);
                }
                if let Some(Value::String(uri)) = v.pointer_mut("/_meta/ui/resourceUri") {
                    *uri = names::expose_uri(uri_prefix, uri);
                }
            }
            ResultKind::Prompt => {
                for msg in array_mut(&mut v, "messages") {
                    if let Some(block) = msg.get_mut("content") {
                        prefix_block(block, uri_prefix);
                    }
                }
            }
            ResultKind::Resource => {
                for c in array_mut(&mut v, "contents") {
                    prefix_field(c, "uri", uri_prefix);
                }
            }
            ResultKind::Opaque => {}
        }
    }
    match kind {
        _ if !needs_downgrade => {}
        ResultKind::ToolCall => version::downgrade_tool_result(&mut v, host),
        ResultKind::Prompt => version::downgrade_prompt_result(&mut v, host),
        ResultKind::Resource | ResultKind::Opaque => {}
    }
    RawJson::from_value(&v).unwrap_or(raw)
}

/// A backend's JSON-RPC error, in the host's namespace:
/// - `URLElicitationRequiredError` (-32042, MCP 2025-11-25 client/elicitation):
///   the `elicitationId`s in `data.elicitations[]` get the backend's namespace,
///   like those of relayed `elicitation/create` requests;
/// - an error about a resource (-32002 "Resource not found" carries `data.uri`,
///   MCP 2025-11-25 server/resources "Error Handling") names the URI as the host
///   knows it, with the backend's prefix, never the backend's own.
pub fn expose_error(error: &mut ErrorObject, backend: &str, uri_prefix: &str) {
    let Some(data) = error.data.as_mut() else {
        return;
    };
    if error.code == -32042
        && let Some(list) = data.get_mut("elicitations").and_then(Value::as_array_mut)
    {
        for e in list {
            if let Some(Value::String(id)) = e.get_mut("elicitationId") {
                *id = names::expose_id(backend, id);
            }
        }
    }
    if !uri_prefix.is_empty()
        && let Some(Value::String(uri)) = data.get_mut("uri")
    {
        *uri = names::expose_uri(uri_prefix, uri);
    }
}

fn array_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn prefix_field(v: &mut Value, key: &str, uri_prefix: &str) {
    if let Some(Value::String(uri)) = v.get_mut(key) {
        *uri = names::expose_uri(uri_prefix, uri);
    }
}

/// `resource_link` blocks carry `uri`; embedded `resource` blocks carry
/// `resource.uri` (MCP 2025-11-25 server/tools, content).
fn prefix_block(block: &mut Value, uri_prefix: &str) {
    match block.get("type").and_then(Value::as_str) {
        Some("resource_link") => prefix_field(block, "uri", uri_prefix),
        Some("resource") => {
            if let Some(r) = block.get_mut("resource") {
                prefix_field(r, "uri", uri_prefix);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(v: &Value) -> RawJson {
        RawJson::from_value(v).unwrap()
    }

    fn run(v: &Value, kind: ResultKind, prefix: &str, host: ProtocolVersion) -> Value {
        rewrite_result(raw(v), kind, prefix, host, Marks::all())
            .parse()
            .unwrap()
    }

    #[test]
    fn prefixes_uris_in_tool_results() {
        let out = run(
            &json!({"content": [
                {"type": "text", "text": "uri: not touched"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"},
                {"type": "resource", "resource": {"uri": "test://b", "text": "x"}}
            ], "_meta": {"ui": {"resourceUri": "ui://widget/x.html"}}}),
            ResultKind::ToolCall,
            "fs",
            ProtocolVersion::LATEST,
        );
        assert_eq!(out["content"][1]["uri"], "fs+file:///a");
        assert_eq!(out["content"][2]["resource"]["uri"], "fs+test://b");
        assert_eq!(out["_meta"]["ui"]["resourceUri"], "fs+ui://widget/x.html");
    }

    /// An MCP Apps tool result whose only URI is `_meta.ui.resourceUri` (no
    /// `uri` key anywhere) still gets the backend's prefix.
    #[test]
    fn prefixes_a_ui_resource_uri_alone() {
        let out = run(
            &json!({"content": [{"type": "text", "text": "ok"}],
                    "_meta": {"ui": {"resourceUri": "ui://widget/x.html"}}}),
            ResultKind::ToolCall,
            "fs",
            ProtocolVersion::LATEST,
        );
        assert_eq!(out["_meta"]["ui"]["resourceUri"], "fs+ui://widget/x.html");
    }

    #[test]
    fn prefixes_prompt_and_resource_results() {
        let out = run(
            &json!({"messages": [{"role": "user", "content": {"type": "resource", "resource": {"uri": "test://x", "text": "t"}}}]}),
            ResultKind::Prompt,
            "demo",
            ProtocolVersion::LATEST,
        );
        assert_eq!(
            out["messages"][0]["content"]["resource"]["uri"],
            "demo+test://x"
        );
        let out = run(
            &json!({"contents": [{"uri": "test://x", "text": "t"}]}),
            ResultKind::Resource,
            "demo",
            ProtocolVersion::LATEST,
        );
        assert_eq!(out["contents"][0]["uri"], "demo+test://x");
    }

    #[test]
    fn untouched_without_prefix_and_byte_identical() {
        let text = r#"{"contents":[{"uri":"test://x","text":"t"}],"extra":1}"#;
        let r = RawJson::from_raw(serde_json::value::RawValue::from_string(text.into()).unwrap());
        let out = rewrite_result(
            r,
            ResultKind::Resource,
            "",
            ProtocolVersion::LATEST,
            Marks::all(),
        );
        assert_eq!(out.get(), text);
    }

    #[test]
    fn downgrades_for_2025_03_26_hosts() {
        let out = run(
            &json!({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}], "structuredContent": {"x": 1}}),
            ResultKind::ToolCall,
            "",
            ProtocolVersion::V2025_03_26,
        );
        assert!(out.get("structuredContent").is_none());
        assert_eq!(out["content"][0]["type"], "text");
    }
}
