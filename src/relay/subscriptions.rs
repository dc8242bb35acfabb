//! Resource subscriptions (MCP 2025-11-25 server/resources, subscriptions):
//! `resources/subscribe` routed by URI, reference-counted per (backend, URI) among
//! the sessions that use the backend's shared connection, so it is subscribed once
//! and unsubscribed with the last of them, and `notifications/resources/updated`
//! fanned out to exactly the sessions that subscribed on the connection it came
//! from, with the URI in the host's namespace; one from a session's own
//! connection goes to that session. (With `mode = "auto"` sessions of one
//! backend may use the shared connection or their own.) With a shared store
//! only the replica holding a session's subscription counts it
//! (`supervisor/subscriptions.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::backend::Connection;
use crate::catalog::{BackendState, Catalog};
use crate::jsonrpc;
use crate::mcp::{Method, names};
use crate::session::{Session, SessionStore};

/// Subscribed session ids by (backend index, backend URI), each with whether the
/// session subscribed through the backend's shared connection.
type SubscriberMap = HashMap<(usize, String), HashMap<Arc<str>, bool>>;

/// Subscribers per (backend index, backend URI).
#[derive(Default)]
pub struct Subscriptions {
    map: Mutex<SubscriberMap>,
}

impl Subscriptions {
    /// Adds `session` (subscribing through the shared connection if `shared`);
    /// true if it is the first subscriber through that connection.
    fn add(&self, backend: usize, uri: &str, session: &Arc<str>, shared: bool) -> bool {
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let set = m.entry((backend, uri.to_owned())).or_default();
        let first = shared && !set.values().any(|s| *s);
        set.insert(session.clone(), shared);
        first
    }

    /// Removes `session`; true if it was the last subscriber through the shared
    /// connection.
    fn remove(&self, backend: usize, uri: &str, session: &str) -> bool {
        let Ok(mut m) = self.map.lock() else {
            return false;
        };
        let key = (backend, uri.to_owned());
        let Some(set) = m.get_mut(&key) else {
            return false;
        };
        let was_shared = set.remove(session) == Some(true);
        let last = was_shared && !set.values().any(|s| *s);
        if set.is_empty() {
            m.remove(&key);
        }
        last
    }

    /// Sessions subscribed to `uri` on `backend`, each with whether it subscribed
    /// through the shared connection.
    fn subscribers(&self, backend: usize, uri: &str) -> Vec<(Arc<str>, bool)> {
        self.map
            .lock()
            .ok()
            .and_then(|m| {
                m.get(&(backend, uri.to_owned()))
                    .map(|s| s.iter().map(|(k, v)| (k.clone(), *v)).collect())
            })
            .unwrap_or_default()
    }

    /// Forgets every subscription to backend `backend` (it was removed).
    pub fn drop_backend(&self, backend: usize) {
        if let Ok(mut m) = self.map.lock() {
            m.retain(|(b, _), _| *b != backend);
        }
    }

    /// URIs of `backend` that have subscribers through its shared connection.
    fn uris_of(&self, backend: usize) -> Vec<String> {
        self.map
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|((b, _), set)| *b == backend && set.values().any(|s| *s))
                    .map(|((_, u), _)| u.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `session` is subscribed here to `uri` of backend `backend`.
    pub fn contains(&self, backend: usize, uri: &str, session: &str) -> bool {
        let Ok(m) = self.map.lock() else {
            return false;
        };
        m.get(&(backend, uri.to_owned()))
            .is_some_and(|set| set.contains_key(session))
    }

    /// Every (backend, URI, subscriber) subscribed here.
    pub fn entries(&self) -> Vec<(usize, String, Arc<str>)> {
        let Ok(m) = self.map.lock() else {
            return Vec::new();
        };
        let each = m
            .iter()
            .flat_map(|((b, u), set)| set.keys().map(move |sid| (*b, u.clone(), sid.clone())));
        each.collect()
    }

    /// Drops every subscription of `session`; returns the (backend, URI) pairs that
    /// lost their last subscriber through the shared connection, and whether
    /// the session had any subscription here.
    fn forget_session(&self, session: &str) -> (Vec<(usize, String)>, bool) {
        let Ok(mut m) = self.map.lock() else {
            return (Vec::new(), false);
        };
        let (mut emptied, mut any) = (Vec::new(), false);
        m.retain(|key, set| {
            let was = set.remove(session);
            any |= was.is_some();
            if was == Some(true) && !set.values().any(|s| *s) {
                emptied.push(key.clone());
            }
            !set.is_empty()
        });
        (emptied, any)
    }
}

impl Subscriptions {
    /// Records `session`'s subscription to `uri` of backend `backend` (also in the
    /// session's record); true if it is the first subscriber through the shared
    /// connection (which must then subscribe upstream).
    pub fn subscribe(&self, backend: &BackendState, uri: &str, session: &Session) -> bool {
        session.note_subscription(&backend.spec.name, uri, true);
        let shared = backend.shares_with(session.created());
        self.add(backend.index, uri, session.id(), shared)
    }

    /// Ends `session`'s subscription; true if it was the last subscriber through
    /// the shared connection (which must then unsubscribe upstream).
    pub fn unsubscribe(&self, backend: &BackendState, uri: &str, session: &Session) -> bool {
        session.note_subscription(&backend.spec.name, uri, false);
        self.remove(backend.index, uri, session.id())
    }

    /// Subscribes listen stream `listener` (an id that is no session's) to `uri` of
    /// backend `backend` on its shared (or catalogue) connection, which is asked
    /// `resources/subscribe` when it is the URI's first subscriber there.
    pub fn subscribe_listener(
        &self,
        catalog: &Catalog,
        backend: usize,
        uri: &str,
        listener: &Arc<str>,
    ) {
        if !self.add(backend, uri, listener, true) {
            return;
        }
        let Some(conn) = catalog.backend(backend).shared().current() else {
            return;
        };
        let params = json!({ "uri": uri });
        tokio::spawn(async move {
            let timeout = conn.timeout();
            if let Err(e) = conn
                .request(&Method::ResourcesSubscribe, Some(params), None, timeout)
                .await
            {
                tracing::warn!(backend = %conn.backend, cause = %e, "resources/subscribe for a listen stream failed");
            }
        });
    }

    /// Ends a listen stream's subscription to `uri` of backend `backend`,
    /// unsubscribing the shared connection with its last subscriber.
    pub fn unsubscribe_listener(
        &self,
        catalog: &Catalog,
        backend: usize,
        uri: &str,
        listener: &str,
    ) {
        if !self.remove(backend, uri, listener) {
            return;
        }
        if let Some(conn) = catalog.backend(backend).shared().current() {
            let params = json!({ "uri": uri });
            tokio::spawn(async move {
                let timeout = conn.timeout();
                let _ = conn
                    .request(&Method::ResourcesUnsubscribe, Some(params), None, timeout)
                    .await;
            });
        }
    }

    /// Forgets a session's subscriptions, unsubscribing shared connections from
    /// URIs nobody else watches through them; whether it had any here.
    pub fn drop_session(&self, catalog: &Catalog, session: &Session) -> bool {
        let (emptied, any) = self.forget_session(session.id());
        for (backend, uri) in emptied {
            let b = catalog.backend(backend);
            if let Some(conn) = b.shared().current() {
                tokio::spawn(async move {
                    let timeout = conn.timeout();
                    let params = json!({ "uri": uri });
                    let _ = conn
                        .request(&Method::ResourcesUnsubscribe, Some(params), None, timeout)
                        .await;
                });
            }
        }
        any
    }

    /// A shared backend's connection was replaced (restart): the new one is
    /// subscribed to every URI that still has subscribers.
    pub fn resubscribe(&self, backend: usize, conn: &Arc<Connection>) {
        for uri in self.uris_of(backend) {
            let conn = conn.clone();
            tokio::spawn(async move {
                let timeout = conn.timeout();
                let params = json!({ "uri": uri });
                if let Err(e) = conn
                    .request(&Method::ResourcesSubscribe, Some(params), None, timeout)
                    .await
                {
                    tracing::warn!(backend = %conn.backend, cause = %e, "resubscribing after a restart failed");
                }
            });
        }
    }

    /// `notifications/resources/updated` from backend `backend`, with the URI
    /// in the host's namespace: on a shared connection to its subscribers
    /// through it; on a per-session connection to its session if it
    /// subscribed here — or, with a shared store (`clustered`), whichever
    /// replica subscribed it (a per-session HTTP backend's session is
    /// subscribed by one replica and listened to by another, a per-session
    /// stdio child is subscribed again by its next owner), so there an update
    /// racing an unsubscribe may still reach the host.
    pub fn updated(
        &self,
        catalog: &Catalog,
        sessions: &dyn SessionStore,
        backend: usize,
        owner: Option<&str>,
        clustered: bool,
        mut params: Value,
    ) {
        let Some(uri) = params.get("uri").and_then(Value::as_str).map(str::to_owned) else {
            return;
        };
        params["uri"] = names::expose_uri(&catalog.backend(backend).uri_prefix, &uri).into();
        let bytes = jsonrpc::notification_bytes(Method::ResourcesUpdated.as_str(), Some(&params));
        if let Some(o) = owner {
            let subscribed_here = || {
                self.subscribers(backend, &uri)
                    .iter()
                    .any(|(sid, _)| &**sid == o)
            };
            if !clustered && !subscribed_here() {
                return;
            }
            if let Some(session) = sessions.get(o) {
                session.send_unrelated(bytes.into());
            }
            return;
        }
        for (sid, shared) in self.subscribers(backend, &uri) {
            if !shared {
                continue;
            }
            if let Some(session) = sessions.get(&sid) {
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
        assert!(subs.add(0, "x://1", &a, true));
        assert!(!subs.add(0, "x://1", &b, true));
        assert!(
            subs.add(1, "x://1", &a, true),
            "other backend counts separately"
        );
        assert!(!subs.remove(0, "x://1", "a"));
        assert_eq!(subs.subscribers(0, "x://1"), vec![(b.clone(), true)]);
        assert!(subs.remove(0, "x://1", "b"));
        assert!(!subs.remove(0, "x://1", "b"), "already gone");
        assert_eq!(
            subs.forget_session("a"),
            (vec![(1, "x://1".to_string())], true)
        );
    }

    #[test]
    fn counts_only_subscribers_through_the_shared_connection() {
        let subs = Subscriptions::default();
        let own: Arc<str> = "own".into();
        let shared: Arc<str> = "shared".into();
        assert!(
            !subs.add(0, "x://1", &own, false),
            "own connection: not counted"
        );
        assert!(
            subs.add(0, "x://1", &shared, true),
            "first through the shared one"
        );
        assert_eq!(subs.uris_of(0), vec!["x://1".to_string()]);
        assert!(
            subs.remove(0, "x://1", "shared"),
            "last through the shared one"
        );
        assert!(subs.uris_of(0).is_empty());
        assert_eq!(subs.forget_session("own"), (Vec::new(), true));
        assert_eq!(subs.forget_session("own"), (Vec::new(), false));
    }
}
