//! What the dispatch does differently for a 2026-07-28 host: `server/discover`
//! answered from the catalogue already held, the capabilities the modern face can
//! honour, and the host's per-request envelope kept off the backend hop.

use std::time::Duration;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::Reply;
use crate::catalog::Catalog;
use crate::error::RpcError;
use crate::jsonrpc::{self, Id};
use crate::mcp::version::complete_for_modern;
use crate::mcp::{Changed, META_ENVELOPE, ProtocolVersion};
use crate::relay::{Filter, Relay};
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
/// backends' (`listChanged` and `resources.subscribe` are served through
/// `subscriptions/listen`), without the 2025-11-25 core tasks, which 2026-07-28
/// replaced by an extension with another wire.
pub(super) fn capabilities(union: &Value) -> Value {
    let mut caps = union.as_object().cloned().unwrap_or_default();
    caps.remove("tasks");
    Value::Object(caps)
}

/// The `list_changed` members of a `SubscriptionFilter` and what each watches.
const LIST_FLAGS: [(&str, Changed); 3] = [
    ("toolsListChanged", Changed::Tools),
    ("promptsListChanged", Changed::Prompts),
    ("resourcesListChanged", Changed::Resources),
];

/// Checks a `subscriptions/listen`'s `params.notifications`, a
/// `SubscriptionFilter` (MCP 2026-07-28 basic/patterns/subscriptions and schema):
/// an object, whose `*ListChanged` members, when present, are booleans and whose
/// `resourceSubscriptions`, when present, is an array of strings. Other members
/// are left alone.
///
/// Errors: -32602 naming the member, e.g. `params.notifications must be an object`.
pub(super) fn check_listen(params: &Value) -> Result<(), RpcError> {
    let Some(filter) = params.get("notifications").and_then(Value::as_object) else {
        return Err(RpcError::invalid_params(
            "params.notifications must be an object (a SubscriptionFilter)",
        ));
    };
    for (key, _) in LIST_FLAGS {
        if filter.get(key).is_some_and(|v| !v.is_boolean()) {
            return Err(RpcError::invalid_params(format!(
                "params.notifications.{key} must be a boolean"
            )));
        }
    }
    match filter.get("resourceSubscriptions") {
        None => Ok(()),
        Some(Value::Array(uris)) if uris.iter().all(Value::is_string) => Ok(()),
        Some(_) => Err(RpcError::invalid_params(
            "params.notifications.resourceSubscriptions must be an array of strings",
        )),
    }
}

/// `subscriptions/listen` (MCP 2026-07-28 basic/patterns/subscriptions): opens the
/// stream, acknowledging the subset served — the `list_changed` kinds asked for,
/// and the resources whose backend supports subscriptions — and subscribes those
/// resources at their backends until the host closes the stream. `params` passed
/// [`check_listen`].
pub(super) fn listen(
    catalog: &Arc<Catalog>,
    relay: &Arc<Relay>,
    host: &Host,
    id: &Id,
    params: &Value,
) -> Reply {
    let asked = params.get("notifications").cloned().unwrap_or_default();
    let flag = |k: &str| asked.get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut filter = Filter::default();
    for (key, kind) in LIST_FLAGS {
        if flag(key) {
            filter.changed.push(kind);
        }
    }
    let view = catalog.view_for_key(&host.view_key());
    let uris = asked.get("resourceSubscriptions").and_then(Value::as_array);
    for uri in uris.into_iter().flatten().filter_map(Value::as_str) {
        let Some((backend, original)) = view.route_uri(uri) else {
            continue;
        };
        let subscribable = catalog.backend(backend).catalog().is_some_and(|c| {
            c.init.capabilities.pointer("/resources/subscribe") == Some(&Value::Bool(true))
        });
        if subscribable {
            filter.uris.push((backend, original, uri.to_owned()));
        }
    }
    let (tx, rx) = mpsc::channel(LISTEN_QUEUE);
    let closed = tx.clone();
    let key = relay.listens().open(id, &filter, tx);
    let listener: Arc<str> = format!("listen:{key}").into();
    for (backend, original, _) in &filter.uris {
        relay
            .subscriptions()
            .subscribe_listener(catalog, *backend, original, &listener);
    }
    let (catalog, relay) = (catalog.clone(), relay.clone());
    tokio::spawn(async move {
        closed.closed().await;
        for (backend, uri) in relay.listens().close(key) {
            relay
                .subscriptions()
                .unsubscribe_listener(&catalog, backend, &uri, &listener);
        }
    });
    Reply::Stream(rx)
}

/// Notifications queued toward one listen stream before new ones are dropped.
const LISTEN_QUEUE: usize = 256;

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
    fn modern_capabilities_drop_the_core_tasks() {
        let union = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}, "tasks": {}, "logging": {}});
        assert_eq!(
            capabilities(&union),
            json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}, "logging": {}})
        );
    }
}
