//! `subscriptions/listen` for 2026-07-28 clients (MCP 2026-07-28
//! basic/patterns/subscriptions): the stateless replacement of the GET stream and
//! `resources/subscribe`.
//!
//! The request stays open: its first message is
//! `notifications/subscriptions/acknowledged` with the subset of the filter this
//! server honours, then come only the kinds asked for — `list_changed` of tools,
//! prompts and resources when the catalogue changes ([`Server::update_catalog`]),
//! `resources/updated` of the subscribed URIs — each carrying the listen
//! request's id as `_meta["io.modelcontextprotocol/subscriptionId"]`. It ends when
//! the client cancels it (closes the stream; on stdio `notifications/cancelled`),
//! or at shutdown with the graceful result `{resultType: "complete", _meta:
//! {subscriptionId}}` ([`Server::stop_listening`]).

use std::collections::HashSet;
use std::sync::Arc;

use mcpgate::jsonrpc::{self, ErrorObject, INVALID_PARAMS};
use mcpgate::mcp::{Changed, META_SUBSCRIPTION_ID, Method};
use serde_json::{Map, Value, json};

use crate::demo::catalog::HandlerResult;
use crate::demo::context::CallContext;
use crate::demo::server::{Route, Server, Sink};

/// One open listen stream.
pub(crate) struct Listener {
    sink: Arc<dyn Sink>,
    route: Route,
    /// The listen request's id, on everything the stream carries.
    subscription: Value,
    changed: Vec<Changed>,
    uris: HashSet<String>,
}

impl Listener {
    fn send(&self, method: &Method, mut params: Map<String, Value>) {
        params.insert(
            "_meta".into(),
            json!({ META_SUBSCRIPTION_ID: self.subscription }),
        );
        let msg = jsonrpc::notification_bytes(method.as_str(), Some(&Value::Object(params)));
        self.sink.send(&self.route, msg);
    }

    /// Sends `notifications/<kind>/list_changed` if the stream asked for it.
    pub(crate) fn list_changed(&self, kind: Changed) {
        if self.changed.contains(&kind) {
            self.send(&kind.method(), Map::new());
        }
    }

    /// Sends `notifications/resources/updated` if the stream subscribed to `uri`;
    /// `true` if it did.
    pub(crate) fn resource_updated(&self, uri: &str) -> bool {
        let wanted = self.uris.contains(uri);
        if wanted {
            let mut params = Map::new();
            params.insert("uri".into(), json!(uri));
            self.send(&Method::ResourcesUpdated, params);
        }
        wanted
    }
}

/// The filter's `list_changed` members, their kinds and capabilities.
const KINDS: [(&str, Changed, &str); 3] = [
    ("toolsListChanged", Changed::Tools, "tools"),
    ("promptsListChanged", Changed::Prompts, "prompts"),
    ("resourcesListChanged", Changed::Resources, "resources"),
];

/// What of `requested` (a `SubscriptionFilter`) this server honours: the
/// `list_changed` kinds whose capability declares `listChanged`, and the
/// subscribed URIs it serves (with `resources.subscribe`). `-32602` if the filter
/// is not an object or `resourceSubscriptions` not an array of strings.
fn honour(server: &Server, requested: &Value) -> Result<(Vec<Changed>, Vec<String>), ErrorObject> {
    let invalid = |m: &str| ErrorObject::new(INVALID_PARAMS, format!("Invalid params: {m}"));
    let Some(requested) = requested.as_object() else {
        return Err(invalid(
            "`notifications` must be a subscription filter object",
        ));
    };
    let caps = server.capabilities();
    let changed = KINDS
        .iter()
        .filter(|(member, _, cap)| {
            requested.get(*member) == Some(&Value::Bool(true))
                && caps[*cap]["listChanged"] == Value::Bool(true)
        })
        .map(|(_, kind, _)| *kind)
        .collect();
    let mut uris: Vec<String> = Vec::new();
    match requested.get("resourceSubscriptions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let catalog = server.catalog();
            for item in items {
                let uri = item
                    .as_str()
                    .ok_or_else(|| invalid("`resourceSubscriptions` must hold URIs"))?;
                if caps["resources"]["subscribe"] == Value::Bool(true)
                    && catalog.has_resource(uri)
                    && !uris.iter().any(|u| u == uri)
                {
                    uris.push(uri.to_owned());
                }
            }
        }
        Some(_) => return Err(invalid("`resourceSubscriptions` must be an array")),
    }
    Ok((changed, uris))
}

/// `subscriptions/listen`: acknowledges, then delivers until cancelled (the
/// future is dropped) or until the server stops listening, which ends it with
/// the graceful result.
pub(crate) async fn listen(ctx: &CallContext, params: &Value) -> HandlerResult {
    let server = ctx.server();
    let requested = params.get("notifications").unwrap_or(&Value::Null);
    let (changed, uris) = honour(&server, requested)?;
    let subscription = ctx.request_id().to_value();
    let mut honoured = Map::new();
    for (member, kind, _) in KINDS {
        if changed.contains(&kind) {
            honoured.insert(member.into(), true.into());
        }
    }
    if !uris.is_empty() {
        honoured.insert("resourceSubscriptions".into(), json!(uris));
    }
    let ack = json!({
        "notifications": honoured,
        "_meta": { META_SUBSCRIPTION_ID: subscription },
    });
    ctx.notify(&Method::SubscriptionsAcknowledged, &ack);
    let (sink, route) = ctx.related_sink();
    let listener = Arc::new(Listener {
        sink,
        route,
        subscription: subscription.clone(),
        changed,
        uris: uris.into_iter().collect(),
    });
    server.add_listener(&listener);
    server.listening().cancelled().await;
    drop(listener);
    Ok(json!({ "_meta": { META_SUBSCRIPTION_ID: subscription } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honours_what_the_server_can_deliver() {
        let server = crate::demo::demo_server();
        let asked = json!({
            "toolsListChanged": true,
            "promptsListChanged": false,
            "resourceSubscriptions": ["demo://counter", "demo://nope", "demo://counter"]
        });
        let (changed, uris) = honour(&server, &asked).unwrap();
        assert_eq!(changed, vec![Changed::Tools]);
        assert_eq!(uris, vec!["demo://counter".to_owned()]);
        assert!(honour(&server, &json!(true)).is_err());
        assert!(honour(&server, &json!({ "resourceSubscriptions": [1] })).is_err());
    }
}
