//! MCP protocol revisions and everything that differs between them: the one place
//! where the gateway decides what a host of a given revision may see. Older hosts
//! get results and list items shaped to their revision (MCP 2025-11-25 changelog,
//! 2025-06-18 changelog: fields and content types each revision added).

use std::fmt;

use serde_json::{Value, json};

/// An MCP revision the gateway speaks: the legacy (initialize-based) ones and the
/// stateless 2026-07-28 ("modern") one (MCP 2026-07-28 basic/versioning, terms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2024-11-05 (HTTP+SSE era; accepted from backends only).
    V2024_11_05,
    /// 2025-03-26 (Streamable HTTP, batches).
    V2025_03_26,
    /// 2025-06-18 (no batches, structured output, elicitation).
    V2025_06_18,
    /// 2025-11-25 (tasks, URL elicitation, icons).
    V2025_11_25,
    /// 2026-07-28: stateless, per-request `_meta`, `server/discover`, MRTR.
    V2026_07_28,
}

impl ProtocolVersion {
    /// The newest revision; offered to backends and answered to hosts that ask for
    /// something unknown (MCP 2025-11-25 basic/lifecycle, version negotiation).
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// Revisions a host can negotiate with `initialize`, newest first.
    pub const HOST_SUPPORTED: [ProtocolVersion; 3] = [
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ];

    /// Every revision the endpoint serves, newest first: what `server/discover`
    /// lists as `supportedVersions` and a `-32022` names as `data.supported`
    /// (MCP 2026-07-28 basic/versioning: legacy ones included).
    pub const SERVED: [ProtocolVersion; 4] = [
        ProtocolVersion::V2026_07_28,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ];

    /// The modern revision.
    pub const MODERN: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// Assumed when a host sends no `MCP-Protocol-Version` header and nothing else
    /// tells (MCP 2025-11-25 basic/transports, protocol version header).
    pub const DEFAULT_HTTP: ProtocolVersion = ProtocolVersion::V2025_03_26;

    /// The wire string, e.g. `"2025-11-25"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a wire string; `None` for anything the gateway does not speak.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        Some(match s {
            "2024-11-05" => ProtocolVersion::V2024_11_05,
            "2025-03-26" => ProtocolVersion::V2025_03_26,
            "2025-06-18" => ProtocolVersion::V2025_06_18,
            "2025-11-25" => ProtocolVersion::V2025_11_25,
            "2026-07-28" => ProtocolVersion::V2026_07_28,
            _ => return None,
        })
    }

    /// Whether this is the stateless era (no `initialize`, no sessions).
    pub fn is_modern(self) -> bool {
        self >= ProtocolVersion::V2026_07_28
    }

    /// Parses a revision hosts may use ([`HOST_SUPPORTED`](Self::HOST_SUPPORTED));
    /// `None` for any other string, e.g. in an `MCP-Protocol-Version` header (HTTP
    /// 400, MCP 2025-11-25 basic/transports, protocol version header).
    pub fn parse_host(s: &str) -> Option<ProtocolVersion> {
        ProtocolVersion::parse(s).filter(|v| ProtocolVersion::HOST_SUPPORTED.contains(v))
    }

    /// The revision answered to an `initialize` asking for `requested`: that one if
    /// hosts may use it, else [`LATEST`](Self::LATEST) (MCP 2025-11-25
    /// basic/lifecycle, version negotiation).
    pub fn negotiate(requested: &str) -> ProtocolVersion {
        ProtocolVersion::parse_host(requested).unwrap_or(ProtocolVersion::LATEST)
    }

    /// Whether JSON-RPC batches are allowed (removed in 2025-06-18).
    pub fn allows_batches(self) -> bool {
        self <= ProtocolVersion::V2025_03_26
    }

    /// Whether SSE streams should start with a priming event (2025-11-25,
    /// SEP-1699; 2026-07-28 streams have no event ids and are not resumable).
    pub fn primes_streams(self) -> bool {
        self == ProtocolVersion::V2025_11_25
    }
}

impl serde::Serialize for ProtocolVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ProtocolVersion::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown protocol revision {s:?}")))
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ProtocolVersion {
    /// Whether this revision knows the core tasks of 2025-11-25 (2026-07-28 made
    /// tasks an extension with another wire).
    pub fn has_tasks(self) -> bool {
        self == ProtocolVersion::V2025_11_25
    }

    /// Whether a tool result must be downgraded for this revision: 2025-03-26
    /// knows neither `structuredContent` nor `resource_link` blocks.
    pub fn needs_tool_result_downgrade(self) -> bool {
        self < ProtocolVersion::V2025_06_18
    }
}

/// The server capabilities shown to a host of revision `host`: `tasks` only from
/// 2025-11-25.
pub fn shape_capabilities(caps: &mut Value, host: ProtocolVersion) {
    if !host.has_tasks()
        && let Some(c) = caps.as_object_mut()
    {
        c.remove("tasks");
    }
}

fn array_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// A 2025-03-26 host knows neither `structuredContent` nor `resource_link`
/// blocks: structured output becomes text (it is already mirrored in `content` by
/// conforming servers) and links become text naming the URI.
pub fn downgrade_tool_result(v: &mut Value) {
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

/// Makes a complete result fit for a 2026-07-28 host (MCP 2026-07-28 basic/index
/// §ResultType, server/utilities/caching): `resultType: "complete"` unless the
/// result names its type, the gateway's `serverInfo` in `_meta`, and for the
/// cacheable results (`server/discover`, the four lists, `resources/read`)
/// `ttlMs: 0` and `cacheScope: "private"` unless present (the gateway filters per
/// caller and cannot vouch for a backend's caching).
pub fn complete_for_modern(v: &mut serde_json::Map<String, Value>, cacheable: bool) {
    v.entry("resultType").or_insert_with(|| "complete".into());
    if cacheable {
        v.entry("ttlMs").or_insert_with(|| 0.into());
        v.entry("cacheScope").or_insert_with(|| "private".into());
    }
    let meta = v.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            crate::mcp::META_SERVER_INFO.into(),
            crate::mcp::implementation(),
        );
    }
}

/// [`complete_for_modern`] on a raw result; a result that is not an object is
/// returned as is.
pub fn complete_raw_for_modern(
    raw: Box<serde_json::value::RawValue>,
    cacheable: bool,
) -> Box<serde_json::value::RawValue> {
    let Ok(mut v) = serde_json::from_str::<serde_json::Map<String, Value>>(raw.get()) else {
        return raw;
    };
    complete_for_modern(&mut v, cacheable);
    serde_json::value::to_raw_value(&v).unwrap_or(raw)
}

/// Result fields only the 2026-07-28 wire has (MCP 2026-07-28 basic/index
/// §ResultType, server/utilities/caching): never shown to a legacy host.
const MODERN_ONLY: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];

/// A 2026-07-28 backend's result made fit for a legacy host: the modern-only
/// fields and `_meta` serverInfo removed. An `input_required` result cannot
/// reach a legacy host (no MRTR there): a `tools/call` (`tool_call`) gets an
/// `isError` result saying so, other methods a -32603 error. A result without
/// modern fields is returned untouched (legacy backends).
pub fn result_for_legacy(
    raw: Box<serde_json::value::RawValue>,
    tool_call: bool,
) -> Result<Box<serde_json::value::RawValue>, crate::jsonrpc::ErrorObject> {
    if !MODERN_ONLY.iter().any(|k| raw.get().contains(k)) {
        return Ok(raw);
    }
    let Ok(mut v) = serde_json::from_str::<serde_json::Map<String, Value>>(raw.get()) else {
        return Ok(raw);
    };
    if v.get("resultType").and_then(Value::as_str) == Some("input_required") {
        let why = "the backend asked for client input (input_required), which the gateway does not relay to 2025-era sessions yet";
        if !tool_call {
            return Err(crate::jsonrpc::ErrorObject::new(
                crate::jsonrpc::INTERNAL_ERROR,
                why,
            ));
        }
        let shown = json!({"content": [{"type": "text", "text": why}], "isError": true});
        return Ok(serde_json::value::to_raw_value(&shown).unwrap_or(raw));
    }
    for k in MODERN_ONLY {
        v.remove(k);
    }
    if let Some(meta) = v.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(crate::mcp::META_SERVER_INFO);
        if meta.is_empty() {
            v.remove("_meta");
        }
    }
    Ok(serde_json::value::to_raw_value(&v).unwrap_or(raw))
}

/// A JSON-RPC error shaped for a host of revision `host`: 2026-07-28 has no
/// `-32002` (resource not found is `-32602`, with `data.uri` kept; MCP 2026-07-28
/// server/resources, error handling).
pub fn shape_error(error: &mut crate::jsonrpc::ErrorObject, host: ProtocolVersion) {
    if host.is_modern() && error.code == crate::jsonrpc::RESOURCE_NOT_FOUND {
        error.code = crate::jsonrpc::INVALID_PARAMS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_fields_never_reach_legacy_hosts() {
        let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
        let done = raw(json!({"contents": [], "resultType": "complete", "ttlMs": 5,
            "cacheScope": "public", "_meta": {"io.modelcontextprotocol/serverInfo": {}}}));
        let shown: Value =
            serde_json::from_str(result_for_legacy(done, false).unwrap().get()).unwrap();
        assert_eq!(shown, json!({"contents": []}));
        let ask = json!({"resultType": "input_required", "inputRequests": {}});
        let tool: Value =
            serde_json::from_str(result_for_legacy(raw(ask.clone()), true).unwrap().get()).unwrap();
        assert_eq!(tool["isError"], true);
        assert!(tool.get("resultType").is_none());
        assert_eq!(result_for_legacy(raw(ask), false).unwrap_err().code, -32603);
        let legacy = raw(json!({"content": [{"type": "text", "text": "ttlMs"}]}));
        assert_eq!(
            result_for_legacy(legacy.clone(), true).unwrap().get(),
            legacy.get()
        );
    }

    #[test]
    fn round_trips_and_orders() {
        for v in ProtocolVersion::HOST_SUPPORTED {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
        assert!(ProtocolVersion::V2025_03_26.allows_batches());
        assert!(!ProtocolVersion::V2025_06_18.allows_batches());
        assert_eq!(
            ProtocolVersion::parse("2026-07-28"),
            Some(ProtocolVersion::MODERN)
        );
        assert!(!ProtocolVersion::HOST_SUPPORTED.contains(&ProtocolVersion::MODERN));
        assert!(ProtocolVersion::MODERN.is_modern() && !ProtocolVersion::LATEST.is_modern());
        assert_eq!(ProtocolVersion::parse("banana"), None);
        assert_eq!(ProtocolVersion::parse_host("2024-11-05"), None);
        assert_eq!(
            ProtocolVersion::negotiate("2025-06-18"),
            ProtocolVersion::V2025_06_18
        );
        assert_eq!(
            ProtocolVersion::negotiate("2024-11-05"),
            ProtocolVersion::LATEST
        );
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
}
