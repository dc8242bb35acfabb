//! What the dispatch does differently for a 2026-07-28 host: `server/discover`
//! answered from the catalogue already held, the capabilities the modern face can
//! honour, and the host's per-request envelope kept off the backend hop.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::catalog::Catalog;
use crate::error::RpcError;
use crate::jsonrpc::{self, Id};
use crate::mcp::version::complete_for_modern;
use crate::mcp::{META_ENVELOPE, ProtocolVersion};
use crate::session::Host;
use crate::supervisor::Supervisor;

/// How long `server/discover` waits for backends still loading at start: it must
/// answer within a bounded time even when every backend hangs (SDKs treat a slow
/// probe as an outage, rmcp gives up after 10 s).
const DISCOVER_WAIT: Duration = Duration::from_secs(2);

/// `server/discover` (MCP 2026-07-28 server/discover): the revisions served, the
/// capabilities of the caller's view, the merged instructions. Never fans out to
/// backends; before every backend has loaded it answers what is known.
pub(super) async fn discover(
    catalog: &Catalog,
    supervisor: &Supervisor,
    host: &Host,
    id: &Id,
) -> Result<Bytes, RpcError> {
    supervisor.wait_loaded(DISCOVER_WAIT).await;
    let view = catalog.view_for_key(&host.view_key());
    let versions: Vec<&str> = ProtocolVersion::SERVED.iter().map(|v| v.as_str()).collect();
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!(versions));
    result.insert("capabilities".into(), capabilities(&view.capabilities));
    if let Some(text) = &view.instructions {
        result.insert("instructions".into(), text.clone().into());
    }
    complete_for_modern(&mut result, true);
    Ok(jsonrpc::result_value_bytes(id, &Value::Object(result)).into())
}

/// The server capabilities a 2026-07-28 host is offered: the union of the
/// backends', without what the modern face does not carry yet (`subscriptions/listen`
/// behind `listChanged` and `resources.subscribe`; the 2025-11-25 core tasks,
/// which 2026-07-28 replaced by an extension with another wire).
pub(super) fn capabilities(union: &Value) -> Value {
    let mut caps = union.as_object().cloned().unwrap_or_default();
    caps.remove("tasks");
    for kind in ["tools", "prompts", "resources"] {
        if let Some(c) = caps.get_mut(kind).and_then(Value::as_object_mut) {
            c.remove("listChanged");
            c.remove("subscribe");
        }
    }
    Value::Object(caps)
}

/// Removes the host's per-request envelope from `params._meta`: a backend gets
/// the gateway's own hop, and a dual-era backend must not take a request meant
/// for the legacy hop for a modern one. Progress tokens and trace context stay.
pub(super) fn strip_envelope(params: &mut Value) {
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    for key in META_ENVELOPE {
        meta.remove(key);
    }
    if meta.is_empty()
        && let Some(p) = params.as_object_mut()
    {
        p.remove("_meta");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_stays_off_the_backend_hop() {
        let mut p = json!({"name": "t", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "progressToken": 3
        }});
        strip_envelope(&mut p);
        assert_eq!(p, json!({"name": "t", "_meta": {"progressToken": 3}}));
        let mut p = json!({"name": "t", "_meta": {"io.modelcontextprotocol/logLevel": "info"}});
        strip_envelope(&mut p);
        assert_eq!(p, json!({"name": "t"}));
    }

    #[test]
    fn modern_capabilities_drop_what_is_not_carried() {
        let union = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}, "tasks": {}, "logging": {}});
        assert_eq!(
            capabilities(&union),
            json!({"tools": {}, "resources": {}, "logging": {}})
        );
    }
}
