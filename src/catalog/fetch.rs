//! Fetching a backend's complete lists (every page) and repairing what strict
//! hosts would reject: a gateway that served the first page only, or passed on a
//! schema a strict host refuses, would break every host behind it.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::backend::{BackendError, Connection, InitInfo};
use crate::mcp::{ListKind, Method};

/// Upper bound on pages fetched per list, against a backend that never ends.
const MAX_PAGES: usize = 1000;

/// Everything a backend offers, as it sent it (tools already repaired).
#[derive(Debug, Clone)]
pub struct BackendCatalog {
    /// The backend's `initialize` answer.
    pub init: InitInfo,
    /// `tools/list` items.
    pub tools: Vec<Value>,
    /// `prompts/list` items.
    pub prompts: Vec<Value>,
    /// `resources/list` items.
    pub resources: Vec<Value>,
    /// `resources/templates/list` items.
    pub templates: Vec<Value>,
}

/// Fetches every list the backend's capabilities promise. A list that fails is
/// logged and left empty; the others are kept.
pub async fn fetch(conn: &Arc<Connection>) -> Result<BackendCatalog, BackendError> {
    let init = conn
        .info()
        .cloned()
        .ok_or_else(|| BackendError::closed(&conn.backend, "not initialized"))?;
    let want = |cap: &str| init.has(cap);
    let (tools, prompts, resources, templates) = tokio::join!(
        list_if(conn, want("tools"), ListKind::Tools),
        list_if(conn, want("prompts"), ListKind::Prompts),
        list_if(conn, want("resources"), ListKind::Resources),
        list_if(conn, want("resources"), ListKind::Templates),
    );
    let tools = tools?
        .into_iter()
        .filter_map(|t| repair_tool(&conn.backend, t))
        .collect();
    Ok(BackendCatalog {
        init,
        tools,
        prompts: prompts?,
        resources: resources?,
        templates: templates?,
    })
}

async fn list_if(
    conn: &Arc<Connection>,
    wanted: bool,
    kind: ListKind,
) -> Result<Vec<Value>, BackendError> {
    if !wanted {
        return Ok(Vec::new());
    }
    let method = kind.method();
    match list_all(conn, &method, kind.key()).await {
        Ok(items) => Ok(items),
        // A dead connection means no catalogue at all.
        Err(e @ (BackendError::Unavailable { .. } | BackendError::Timeout { .. })) => Err(e),
        Err(e) => {
            tracing::warn!(backend = %conn.backend, %method, cause = %e, "cannot list; treating as empty");
            Ok(Vec::new())
        }
    }
}

/// Follows `nextCursor` until the end (MCP server/utilities/pagination).
async fn list_all(
    conn: &Arc<Connection>,
    method: &Method,
    key: &str,
) -> Result<Vec<Value>, BackendError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let raw = conn.request(method, params, None, conn.timeout()).await?;
        let mut page: Map<String, Value> = raw
            .parse()
            .map_err(|e| BackendError::protocol(&conn.backend, format!("{method}: {e}")))?;
        match page.remove(key) {
            Some(Value::Array(list)) => items.extend(list),
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(BackendError::protocol(
                    &conn.backend,
                    format!("{method}: {key} is not an array"),
                ));
            }
        }
        match page.remove("nextCursor") {
            Some(Value::String(next)) if !next.is_empty() && seen.insert(next.clone()) => {
                cursor = Some(next);
            }
            _ => return Ok(items),
        }
    }
    tracing::warn!(backend = %conn.backend, %method, "more than {MAX_PAGES} pages; rest ignored");
    Ok(items)
}

/// Makes a tool acceptable to strict hosts (one bad `inputSchema` must not make a
/// host drop every tool: some hosts reject the whole list). MCP 2025-11-25 server/tools: `inputSchema` MUST be
/// a JSON Schema object with `"type": "object"` at the root, never `null`.
///
/// Missing, `null` or non-object schemas become `{"type":"object"}`; an object
/// without `type` gets `"type":"object"` (a root union stays under it); a schema
/// whose root type can never be an object is omitted with a log line. An invalid
/// `outputSchema` is dropped. Tools without a string `name` are omitted, and so are
/// tools whose `x-mcp-header` annotations break the 2026-07-28 rules (a client
/// MUST drop them: MCP 2026-07-28 streamable-http, custom headers).
pub fn repair_tool(backend: &str, mut tool: Value) -> Option<Value> {
    let obj = tool.as_object_mut()?;
    let Some(name) = obj.get("name").and_then(Value::as_str).map(str::to_owned) else {
        tracing::warn!(backend, "tool without a name omitted");
        return None;
    };
    let schema = obj.entry("inputSchema").or_insert(Value::Null);
    match schema {
        Value::Object(s) => match s.get("type") {
            None => {
                s.insert("type".into(), "object".into());
                tracing::debug!(backend, tool = %name, "inputSchema without type: added type object");
            }
            Some(Value::String(t)) if t == "object" => {}
            Some(Value::Array(types)) if types.iter().any(|t| t == "object") => {
                s.insert("type".into(), "object".into());
            }
            Some(_) => {
                tracing::warn!(backend, tool = %name, "inputSchema root is not an object schema; tool omitted");
                return None;
            }
        },
        other => {
            tracing::warn!(backend, tool = %name, "inputSchema missing or not an object; replaced by {{\"type\":\"object\"}}");
            *other = json!({"type": "object"});
        }
    }
    let schema = obj.get("inputSchema").unwrap_or(&Value::Null);
    if let Err(why) = crate::streamable_http::ParamHeaders::from_schema(schema) {
        tracing::warn!(backend, tool = %name, %why, "invalid x-mcp-header annotation; tool omitted");
        return None;
    }
    let bad_output = match obj.get("outputSchema") {
        None => false,
        Some(Value::Object(s)) => s.get("type").is_some_and(|t| t != "object"),
        Some(_) => true,
    };
    if bad_output {
        tracing::warn!(backend, tool = %name, "outputSchema is not an object schema; dropped");
        obj.remove("outputSchema");
    }
    Some(tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_bad_input_schemas() {
        let cases = [
            (
                json!({"name":"t1","inputSchema":{}}),
                Some(json!({"type":"object"})),
            ),
            (
                json!({"name":"t2","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"}}),
                Some(json!({"$schema":"http://json-schema.org/draft-07/schema#","type":"object"})),
            ),
            (
                json!({"name":"t3","inputSchema":{"anyOf":[{"type":"object"},{"type":"object"}]}}),
                Some(json!({"anyOf":[{"type":"object"},{"type":"object"}],"type":"object"})),
            ),
            (json!({"name":"t4"}), Some(json!({"type":"object"}))),
            (
                json!({"name":"t5","inputSchema":null}),
                Some(json!({"type":"object"})),
            ),
            (
                json!({"name":"t6","inputSchema":{"type":"object"}}),
                Some(json!({"type":"object"})),
            ),
            (json!({"name":"t7","inputSchema":{"type":"string"}}), None),
        ];
        for (tool, want) in cases {
            let got = repair_tool("b", tool.clone()).map(|t| t["inputSchema"].clone());
            assert_eq!(got, want, "{tool}");
        }
        assert!(repair_tool("b", json!({"inputSchema": {}})).is_none());
        let t = repair_tool(
            "b",
            json!({"name":"o","inputSchema":{"type":"object"},"outputSchema":{"type":"array"}}),
        )
        .unwrap();
        assert!(t.get("outputSchema").is_none());
    }
}
