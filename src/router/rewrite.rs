//! Rewriting backend results for hosts: resource URIs inside results get the
//! backend's URI prefix so they route back (BR-21), and fields a host's revision
//! does not know are removed (MCP 2025-11-25 checklist §8.10).

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::names;
use crate::protocol::ProtocolVersion;

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
/// when nothing can need rewriting.
pub fn rewrite_result(
    raw: Box<RawValue>,
    kind: ResultKind,
    uri_prefix: &str,
    host: ProtocolVersion,
) -> Box<RawValue> {
    let needs_uris =
        !uri_prefix.is_empty() && kind != ResultKind::Opaque && raw.get().contains("\"uri");
    let needs_downgrade = host < ProtocolVersion::V2025_06_18 && kind == ResultKind::ToolCall;
    if !needs_uris && !needs_downgrade {
        return raw;
    }
    let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else {
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
    if needs_downgrade {
        downgrade_tool_result(&mut v);
    }
    serde_json::value::to_raw_value(&v).unwrap_or(raw)
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

/// A 2025-03-26 host knows neither `structuredContent` nor `resource_link`
/// blocks: structured output becomes text (it is already mirrored in `content` by
/// conforming servers) and links become text naming the URI.
fn downgrade_tool_result(v: &mut Value) {
    if let Some(obj) = v.as_object_mut() {
        obj.remove("structuredContent");
    }
    for block in array_mut(v, "content") {
        if block.get("type").and_then(Value::as_str) == Some("resource_link") {
            let uri = block.get("uri").and_then(Value::as_str).unwrap_or_default();
            let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
            *block = json!({"type": "text", "text": format!("{name}: {uri}")});
        }
    }
}

/// Removes from a list item (tool, prompt, resource, template) the fields a host
/// on `host` does not know: `icons` and `execution` before 2025-11-25; `title`
/// (also on prompt arguments) and `outputSchema` before 2025-06-18.
pub fn downgrade_item(item: &mut Value, host: ProtocolVersion) {
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    if host < ProtocolVersion::V2025_11_25 {
        obj.remove("icons");
        obj.remove("execution");
    }
    if host < ProtocolVersion::V2025_06_18 {
        obj.remove("title");
        obj.remove("outputSchema");
        if let Some(args) = obj.get_mut("arguments").and_then(Value::as_array_mut) {
            for a in args.iter_mut().filter_map(Value::as_object_mut) {
                a.remove("title");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: &Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(v).unwrap()
    }

    fn run(v: &Value, kind: ResultKind, prefix: &str, host: ProtocolVersion) -> Value {
        serde_json::from_str(rewrite_result(raw(v), kind, prefix, host).get()).unwrap()
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
        let r = RawValue::from_string(text.into()).unwrap();
        let out = rewrite_result(r, ResultKind::Resource, "", ProtocolVersion::LATEST);
        assert_eq!(out.get(), text);
    }

    #[test]
    fn downgrades_list_items() {
        let tool = json!({"name":"t","title":"T","icons":[{"src":"https://x/i.png"}],"execution":{"taskSupport":"optional"},"outputSchema":{"type":"object"},"inputSchema":{"type":"object"}});
        let mut v = tool.clone();
        downgrade_item(&mut v, ProtocolVersion::V2025_06_18);
        assert_eq!(
            v,
            json!({"name":"t","title":"T","outputSchema":{"type":"object"},"inputSchema":{"type":"object"}})
        );
        let mut v = tool.clone();
        downgrade_item(&mut v, ProtocolVersion::V2025_03_26);
        assert_eq!(v, json!({"name":"t","inputSchema":{"type":"object"}}));
        let mut p = json!({"name":"p","arguments":[{"name":"a","title":"A"}]});
        downgrade_item(&mut p, ProtocolVersion::V2025_03_26);
        assert_eq!(p, json!({"name":"p","arguments":[{"name":"a"}]}));
        let mut v = tool;
        downgrade_item(&mut v, ProtocolVersion::V2025_11_25);
        assert!(v.get("icons").is_some());
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
