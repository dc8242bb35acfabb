//! Resource subscriptions (MCP 2025-11-25 server/resources, subscriptions):
//! `resources/subscribe` routed by URI, reference-counted per (backend, URI) on
//! shared connections so the backend is subscribed once and unsubscribed with the
//! last subscriber, and `notifications/resources/updated` fanned out to exactly the
//! sessions that subscribed, with the URI in the host's namespace.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{Reply, Router};
use crate::backend::Connection;
use crate::config::ConnectionMode;
use crate::jsonrpc::{self, ErrorObject, Id};
use crate::session::Session;

/// Session ids by (backend index, backend URI).
type SubscriberMap = HashMap<(usize, String), HashSet<Arc<str>>>;

/// Subscribers per (backend index, backend URI).
#[derive(Default)]
pub struct Subscriptions {
    map: Mutex<SubscriberMap>,
}

impl Subscriptions {
    /// Adds `session`; true if it is the first subscriber.
    fn add(&self, backend: usize, uri: &str, session: &Arc<str>) -> bool {
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let set = m.entry((backend, uri.to_owned())).or_default();
        let first = set.is_empty();
        set.insert(session.clone());
        first
    }

    /// Removes `session`; true if it was the last subscriber.
    fn remove(&self, backend: usize, uri: &str, session: &str) -> bool {
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let key = (backend, uri.to_owned());
        let Some(set) = m.get_mut(&key) else {
            return false;
        };
        let removed = set.remove(session);
        if set.is_empty() {
            m.remove(&key);
            return removed;
        }
        false
    }

    /// Sessions subscribed to `uri` on `backend`.
    fn subscribers(&self, backend: usize, uri: &str) -> Vec<Arc<str>> {
        self.map
            .lock()
            .ok()
            .and_then(|m| {
                m.get(&(backend, uri.to_owned()))
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// Forgets every subscription to backend `backend` (it was removed).
    pub fn drop_backend(&self, backend: usize) {
        if let Ok(mut m) = self.map.lock() {
            m.retain(|(b, _), _| *b != backend);
        }
    }

    /// URIs of `backend` that have subscribers.
    fn uris_of(&self, backend: usize) -> Vec<String> {
        self.map
            .lock()
            .map(|m| {
                m.keys()
                    .filter(|(b, _)| *b == backend)
                    .map(|(_, u)| u.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Drops every subscription of `session`; returns the (backend, URI) pairs that
    /// lost their last subscriber.
    pub fn drop_session(&self, session: &str) -> Vec<(usize, String)> {
        let Ok(mut m) = self.map.lock() else {
            return Vec::new();
        };
        let mut emptied = Vec::new();
        m.retain(|key, set| {
            set.remove(session);
            if set.is_empty() {
                emptied.push(key.clone());
                false
            } else {
                true
            }
        });
        emptied
    }
}

impl Router {
    /// `resources/subscribe` and `resources/unsubscribe`.
    pub(super) async fn subscription(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: &Id,
        method: &str,
        params: &Value,
    ) -> Reply {
        let now = |bytes: Vec<u8>| Reply::Now(bytes.into());
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            let e = ErrorObject::new(jsonrpc::INVALID_PARAMS, "params.uri must be a string");
            return now(jsonrpc::error_bytes(Some(id), &e));
        };
        let Some((backend, original)) = self.view_for(session).route_uri(uri) else {
            let e = ErrorObject::new(jsonrpc::RESOURCE_NOT_FOUND, "Resource not found")
                .with_data(json!({ "uri": uri }));
            return now(jsonrpc::error_bytes(Some(id), &e));
        };
        let b = &self.backends.at(backend);
        let supported = b.catalog().is_some_and(|c| {
            c.init.capabilities.pointer("/resources/subscribe") == Some(&Value::Bool(true))
        });
        if !supported {
            let e = ErrorObject::new(
                jsonrpc::METHOD_NOT_FOUND,
                "Resource subscriptions are not supported for this resource",
            );
            return now(jsonrpc::error_bytes(Some(id), &e));
        }
        let shared = b.mode == ConnectionMode::Shared;
        let subscribe = method == "resources/subscribe";
        let upstream_needed = if subscribe {
            let first = self.subs.add(backend, &original, &session.id);
            !shared || first
        } else {
            let last = self.subs.remove(backend, &original, &session.id);
            !shared || last
        };
        if !upstream_needed {
            return now(jsonrpc::result_value_bytes(id, &json!({})));
        }
        let outcome = match self.connection_for(backend, session).await {
            Ok(conn) => {
                let timeout = conn.timeout();
                conn.request(method, Some(json!({ "uri": original })), None, timeout)
                    .await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(raw) => now(jsonrpc::result_bytes(id, &raw)),
            Err(e) => {
                if subscribe {
                    self.subs.remove(backend, &original, &session.id);
                }
                now(jsonrpc::error_bytes(Some(id), &e.to_error_object()))
            }
        }
    }

    /// Forgets a session's subscriptions, unsubscribing shared backends from URIs
    /// nobody else watches.
    pub(super) fn drop_subscriptions(&self, session: &Session) {
        for (backend, uri) in self.subs.drop_session(&session.id) {
            let b = &self.backends.at(backend);
            if b.mode != ConnectionMode::Shared {
                continue;
            }
            if let Some(conn) = b.shared.current() {
                tokio::spawn(async move {
                    let timeout = conn.timeout();
                    let _ = conn
                        .request(
                            "resources/unsubscribe",
                            Some(json!({ "uri": uri })),
                            None,
                            timeout,
                        )
                        .await;
                });
            }
        }
    }

    /// A shared backend's connection was replaced (restart): the new one is
    /// subscribed to every URI that still has subscribers.
    pub(super) fn resubscribe(&self, backend: usize, conn: &Arc<Connection>) {
        if self.backends.at(backend).mode != ConnectionMode::Shared {
            return;
        }
        for uri in self.subs.uris_of(backend) {
            let conn = conn.clone();
            tokio::spawn(async move {
                let timeout = conn.timeout();
                if let Err(e) = conn
                    .request(
                        "resources/subscribe",
                        Some(json!({ "uri": uri })),
                        None,
                        timeout,
                    )
                    .await
                {
                    tracing::warn!(backend = %conn.backend, cause = %e, "resubscribing after a restart failed");
                }
            });
        }
    }

    /// `notifications/resources/updated` from a backend: to its subscribers only.
    pub(super) fn resource_updated(
        &self,
        conn: &Arc<Connection>,
        backend: usize,
        mut params: Value,
    ) {
        let Some(uri) = params.get("uri").and_then(Value::as_str).map(str::to_owned) else {
            return;
        };
        params["uri"] =
            super::names::expose_uri(&self.backends.at(backend).uri_prefix, &uri).into();
        let bytes = jsonrpc::notification_bytes("notifications/resources/updated", Some(&params));
        let owner = conn.owner_session();
        for sid in self.subs.subscribers(backend, &uri) {
            if owner.as_ref().is_some_and(|o| o.id != sid) {
                continue;
            }
            if let Some(session) = self.sessions.get(&sid) {
                session.send_unrelated(bytes.clone().into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refcounts_per_backend_and_uri() {
        let subs = Subscriptions::default();
        let a: Arc<str> = "a".into();
        let b: Arc<str> = "b".into();
        assert!(subs.add(0, "x://1", &a));
        assert!(!subs.add(0, "x://1", &b));
        assert!(subs.add(1, "x://1", &a), "other backend counts separately");
        assert!(!subs.remove(0, "x://1", "a"));
        assert_eq!(subs.subscribers(0, "x://1"), vec![b.clone()]);
        assert!(subs.remove(0, "x://1", "b"));
        assert!(!subs.remove(0, "x://1", "b"), "already gone");
        assert_eq!(subs.drop_session("a"), vec![(1, "x://1".to_string())]);
    }
}
