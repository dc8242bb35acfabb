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
    /// Whether a host of this revision can have client capability `name`: one its
    /// revision added later is never taken as declared ([`ADDED`]; a 2025-03-26
    /// host declaring `elicitation` is not sent `elicitation/create`).
    pub fn knows_client_capability(self, name: &str) -> bool {
        !ADDED
            .iter()
            .any(|&(since, place, n)| place == Place::ClientCapability && n == name && self < since)
    }
}

/// Where a field of [`ADDED`] lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A list item: tool, prompt, resource, resource template.
    Item,
    /// An argument of a prompt (list item).
    PromptArgument,
    /// A `CallToolResult`.
    ToolResult,
    /// A content block (of a tool result or a prompt message).
    Block,
    /// A content block's `annotations`.
    Annotations,
    /// The server capabilities of the `initialize` result.
    ServerCapability,
    /// The client capabilities of `initialize`.
    ClientCapability,
}

/// What each revision added, and where: a host of an earlier revision never sees
/// it (MCP 2025-06-18 and 2025-11-25 changelogs and schemas). List items, results,
/// content blocks and capabilities are all shaped from this one table (and
/// [`ADDED_BLOCKS`] for whole block types).
const ADDED: [(ProtocolVersion, Place, &str); 11] = [
    (ProtocolVersion::V2025_06_18, Place::Item, "title"),
    (ProtocolVersion::V2025_06_18, Place::Item, "outputSchema"),
    (ProtocolVersion::V2025_06_18, Place::PromptArgument, "title"),
    (
        ProtocolVersion::V2025_06_18,
        Place::ToolResult,
        "structuredContent",
    ),
    (
        ProtocolVersion::V2025_06_18,
        Place::Annotations,
        "lastModified",
    ),
    (
        ProtocolVersion::V2025_06_18,
        Place::ClientCapability,
        "elicitation",
    ),
    (ProtocolVersion::V2025_11_25, Place::Item, "icons"),
    (ProtocolVersion::V2025_11_25, Place::Item, "execution"),
    (ProtocolVersion::V2025_11_25, Place::Block, "icons"),
    (
        ProtocolVersion::V2025_11_25,
        Place::ServerCapability,
        "tasks",
    ),
    (
        ProtocolVersion::V2025_11_25,
        Place::ClientCapability,
        "tasks",
    ),
];

/// Content block types by the revision that added them: an older host gets a text
/// block naming the link instead (`resource_link`, 2025-06-18).
const ADDED_BLOCKS: [(ProtocolVersion, &str); 1] =
    [(ProtocolVersion::V2025_06_18, "resource_link")];

/// Removes from `v` (an object) the fields of `place` that `host`'s revision lacks.
fn strip(v: &mut Value, place: Place, host: ProtocolVersion) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    for &(since, at, name) in &ADDED {
        if at == place && host < since {
            obj.remove(name);
        }
    }
}

/// The server capabilities shown to a host of revision `host` ([`ADDED`]: `tasks`
/// only from 2025-11-25).
pub fn shape_capabilities(caps: &mut Value, host: ProtocolVersion) {
    strip(caps, Place::ServerCapability, host);
}

fn array_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Whether a `tools/call` or `prompts/get` result (its JSON text `raw`) may hold
/// something `host`'s revision lacks: a cheap scan for the names in [`ADDED`] and
/// [`ADDED_BLOCKS`], so that most results are passed on without a parse.
pub fn result_needs_downgrade(host: ProtocolVersion, raw: &[u8]) -> bool {
    host < ProtocolVersion::V2025_11_25
        && (ADDED.iter().any(|&(since, place, name)| {
            host < since
                && matches!(place, Place::ToolResult | Place::Block | Place::Annotations)
                && crate::jsonrpc::raw_contains(raw, name)
        }) || ADDED_BLOCKS
            .iter()
            .any(|&(since, kind)| host < since && crate::jsonrpc::raw_contains(raw, kind)))
}

/// A content block for `host`: a block type its revision lacks becomes a text
/// block naming it (`{name}: {uri}`, the URI still routable), and block and
/// annotation fields it lacks are removed.
pub fn downgrade_block(block: &mut Value, host: ProtocolVersion) {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if ADDED_BLOCKS
        .iter()
        .any(|&(since, k)| k == kind && host < since)
    {
        let uri = block.get("uri").and_then(Value::as_str).unwrap_or_default();
        let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
        *block = json!({"type": "text", "text": format!("{name}: {uri}")});
        return;
    }
    strip(block, Place::Block, host);
    if let Some(a) = block.get_mut("annotations") {
        strip(a, Place::Annotations, host);
    }
}

/// A `CallToolResult` for `host`: result fields and content blocks its revision
/// lacks (2025-03-26: no `structuredContent`, which conforming servers mirror in
/// `content`, and no `resource_link`; 2025-06-18: no `icons` in blocks).
pub fn downgrade_tool_result(v: &mut Value, host: ProtocolVersion) {
    strip(v, Place::ToolResult, host);
    for block in array_mut(v, "content") {
        downgrade_block(block, host);
    }
}

/// A `GetPromptResult` for `host`: each message's content block shaped as in a
/// tool result.
pub fn downgrade_prompt_result(v: &mut Value, host: ProtocolVersion) {
    for msg in array_mut(v, "messages") {
        if let Some(block) = msg.get_mut("content") {
            downgrade_block(block, host);
        }
    }
}

/// Removes from a list item (tool, prompt, resource, template) the fields a host
/// on `host` does not know ([`ADDED`]: `icons` and `execution` before 2025-11-25;
/// `title`, also on prompt arguments, and `outputSchema` before 2025-06-18).
pub fn downgrade_item(item: &mut Value, host: ProtocolVersion) {
    strip(item, Place::Item, host);
    for a in array_mut(item, "arguments") {
        strip(a, Place::PromptArgument, host);
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
    raw: crate::jsonrpc::RawJson,
    cacheable: bool,
) -> crate::jsonrpc::RawJson {
    let Ok(mut v) = raw.parse::<serde_json::Map<String, Value>>() else {
        return raw;
    };
    complete_for_modern(&mut v, cacheable);
    crate::jsonrpc::RawJson::from_value(&v).unwrap_or(raw)
}

/// Result fields only the 2026-07-28 wire has (MCP 2026-07-28 basic/index
/// §ResultType, server/utilities/caching): never shown to a legacy host.
const MODERN_ONLY: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];

/// A 2026-07-28 backend's result made fit for a legacy host: the modern-only
/// fields and `_meta` serverInfo removed. An `input_required` result never
/// reaches a legacy host (no MRTR there): on `tools/call`, `resources/read` and
/// `prompts/get` the shim (`dispatch/shim.rs`) turns it into requests to the
/// host before this; anywhere else (a request that cannot carry one) a
/// `tools/call` (`tool_call`) gets an `isError` result saying so, other methods
/// a -32603 error. A result without modern fields is returned untouched (legacy
/// backends); `marks` ([`Marks::of`] of `raw`) tells which may have them.
pub fn result_for_legacy(
    raw: crate::jsonrpc::RawJson,
    tool_call: bool,
    marks: super::marks::Marks,
) -> Result<crate::jsonrpc::RawJson, crate::jsonrpc::ErrorObject> {
    // The marks search exactly `MODERN_ONLY`.
    if !marks.modern() {
        return Ok(raw);
    }
    let Ok(mut v) = raw.parse::<serde_json::Map<String, Value>>() else {
        return Ok(raw);
    };
    if v.get("resultType").and_then(Value::as_str) == Some("input_required") {
        let why =
            "the server asked for client input (input_required) on a request that cannot carry it";
        if !tool_call {
            return Err(crate::jsonrpc::ErrorObject::new(
                crate::jsonrpc::INTERNAL_ERROR,
                why,
            ));
        }
        let shown = json!({"content": [{"type": "text", "text": why}], "isError": true});
        return Ok(crate::jsonrpc::RawJson::from_value(&shown).unwrap_or(raw));
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
    Ok(crate::jsonrpc::RawJson::from_value(&v).unwrap_or(raw))
}

/// A JSON-RPC error shaped for a host of revision `host`: 2026-07-28 has no
/// `-32002` (resource not found is `-32602`, with `data.uri` kept; MCP 2026-07-28
/// server/resources, error handling), and a session-based host expects `-32002`
/// for it (MCP 2025-11-25 server/resources, error handling): a `-32602` naming a
/// `data.uri` is a 2026-07-28 backend's "resource not found".
pub fn shape_error(error: &mut crate::jsonrpc::ErrorObject, host: ProtocolVersion) {
    use crate::jsonrpc::{INVALID_PARAMS, RESOURCE_NOT_FOUND};
    if host.is_modern() && error.code == RESOURCE_NOT_FOUND {
        error.code = INVALID_PARAMS;
    } else if !host.is_modern()
        && error.code == INVALID_PARAMS
        && error.data.as_ref().and_then(|d| d.get("uri")).is_some()
    {
        error.code = RESOURCE_NOT_FOUND;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_not_found_is_each_eras_own_code() {
        use crate::jsonrpc::{ErrorObject, INVALID_PARAMS, RESOURCE_NOT_FOUND};
        let not_found = |code| {
            let mut e = ErrorObject::new(code, "Resource not found");
            e.data = Some(json!({"uri": "x://gone"}));
            e
        };
        let mut e = not_found(RESOURCE_NOT_FOUND);
        shape_error(&mut e, ProtocolVersion::V2026_07_28);
        assert_eq!(e.code, INVALID_PARAMS);
        let mut e = not_found(INVALID_PARAMS);
        shape_error(&mut e, ProtocolVersion::V2025_11_25);
        assert_eq!(e.code, RESOURCE_NOT_FOUND);
        let mut plain = ErrorObject::new(INVALID_PARAMS, "bad arguments");
        shape_error(&mut plain, ProtocolVersion::V2025_11_25);
        assert_eq!(
            plain.code, INVALID_PARAMS,
            "no uri: a plain invalid-params error"
        );
    }

    #[test]
    fn modern_fields_never_reach_legacy_hosts() {
        let raw = |v: Value| crate::jsonrpc::RawJson::from_value(&v).unwrap();
        let all = super::super::marks::Marks::all();
        let done = raw(json!({"contents": [], "resultType": "complete", "ttlMs": 5,
            "cacheScope": "public", "_meta": {"io.modelcontextprotocol/serverInfo": {}}}));
        let shown: Value =
            serde_json::from_str(result_for_legacy(done, false, all).unwrap().get()).unwrap();
        assert_eq!(shown, json!({"contents": []}));
        let ask = json!({"resultType": "input_required", "inputRequests": {}});
        let tool: Value = serde_json::from_str(
            result_for_legacy(raw(ask.clone()), true, all)
                .unwrap()
                .get(),
        )
        .unwrap();
        assert_eq!(tool["isError"], true);
        assert!(tool.get("resultType").is_none());
        assert_eq!(
            result_for_legacy(raw(ask), false, all).unwrap_err().code,
            -32603
        );
        let legacy = raw(json!({"content": [{"type": "text", "text": "ttlMs"}]}));
        assert_eq!(
            result_for_legacy(legacy.clone(), true, all).unwrap().get(),
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

    #[test]
    fn content_blocks_follow_the_table() {
        let link = json!({"type": "resource_link", "uri": "a+x://1", "name": "one",
            "icons": [{"src": "i"}], "annotations": {"priority": 1, "lastModified": "t"}});
        let raw = json!({"content": [link.clone()], "structuredContent": {}}).to_string();
        assert!(!result_needs_downgrade(
            ProtocolVersion::V2025_11_25,
            raw.as_bytes()
        ));
        assert!(!result_needs_downgrade(
            ProtocolVersion::LATEST,
            raw.as_bytes()
        ));
        assert!(result_needs_downgrade(
            ProtocolVersion::V2025_06_18,
            raw.as_bytes()
        ));
        let plain = json!({"content": [{"type": "text", "text": "hi"}]}).to_string();
        assert!(!result_needs_downgrade(
            ProtocolVersion::V2025_03_26,
            plain.as_bytes()
        ));

        let mut mid = link.clone();
        downgrade_block(&mut mid, ProtocolVersion::V2025_06_18);
        assert!(mid.get("icons").is_none() && mid["annotations"]["lastModified"] == "t");
        let mut old = json!({"content": [link], "structuredContent": {}});
        downgrade_tool_result(&mut old, ProtocolVersion::V2025_03_26);
        assert_eq!(
            old,
            json!({"content": [{"type": "text", "text": "one: a+x://1"}]})
        );
        let mut text = json!({"type": "text", "text": "x", "annotations": {"lastModified": "t"}});
        downgrade_block(&mut text, ProtocolVersion::V2025_03_26);
        assert_eq!(
            text,
            json!({"type": "text", "text": "x", "annotations": {}})
        );

        assert!(!ProtocolVersion::V2025_03_26.knows_client_capability("elicitation"));
        assert!(ProtocolVersion::V2025_03_26.knows_client_capability("sampling"));
        assert!(ProtocolVersion::V2025_06_18.knows_client_capability("elicitation"));
        assert!(!ProtocolVersion::V2025_06_18.knows_client_capability("tasks"));
    }
}
