//! Sessions shared with other replicas through the shared store (`[cluster]
//! redis`): what they broadcast (a session ended, a log level changed, a host
//! cancelled a request) or send this replica (a host's answer to a request
//! relayed here), the
//! revalidation of cached sessions after a store outage (broadcasts are lost
//! while the connection is down), and the drain at shutdown, which lets
//! sessions go instead of ending them.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;

use super::Supervisor;
use crate::cluster::{Ctl, SharedStore};
use crate::mcp::{LogLevel, Method};
use crate::session::Session;

impl Supervisor {
    /// The shared session store, when one is configured.
    pub fn shared(&self) -> Option<&Arc<SharedStore>> {
        self.shared.as_ref()
    }

    /// Sets `session`'s log level and sends it to the session's own backend
    /// connections that log (MCP 2025-11-25 server/utilities/logging); those
    /// opened later get it when they open (`sessions.rs::reestablish`).
    pub fn apply_level(&self, session: &Session, level: LogLevel) {
        session.set_log_level(level);
        for conn in session.connections() {
            if conn.info().is_some_and(|i| i.has("logging")) {
                let params = json!({ "level": level.as_str() });
                tokio::spawn(async move {
                    let timeout = conn.timeout();
                    if let Err(e) = conn
                        .request(&Method::LoggingSetLevel, Some(params), None, timeout)
                        .await
                    {
                        tracing::debug!(backend = %conn.backend, cause = %e, "logging/setLevel refused");
                    }
                });
            }
        }
    }

    /// Follows what the shared store reports until it stops.
    pub async fn follow_cluster(self: Arc<Self>, mut events: mpsc::UnboundedReceiver<Ctl>) {
        while let Some(ctl) = events.recv().await {
            match ctl {
                Ctl::Ended(h) => {
                    if let Some(s) = self.cached(&h) {
                        tracing::info!(session = %s.log_id(), "session ended on another replica");
                        self.end_session(&s).await;
                    }
                }
                Ctl::Level { h, level } => {
                    if let (Some(s), Some(level)) = (self.cached(&h), LogLevel::parse(&level)) {
                        self.apply_level(&s, level);
                    }
                }
                Ctl::Answer { h, message } => match self.cached(&h) {
                    Some(s) => self.relay.answer_forwarded(&s, &message),
                    None => tracing::info!(
                        "answer forwarded for a session this replica no longer holds; dropped"
                    ),
                },
                Ctl::Cancel { h, params } => {
                    if let Some(s) = self.cached(&h) {
                        self.relay.cancel_forwarded(&s, &params);
                    }
                }
                Ctl::Resync => self.revalidate().await,
            }
        }
    }

    /// The cached session whose store key is `h`.
    fn cached(&self, h: &str) -> Option<Arc<Session>> {
        self.sessions.all().into_iter().find(|s| s.store_key() == h)
    }

    /// Ends the cached sessions whose record is gone (ended or expired
    /// elsewhere while broadcasts could not arrive, or a store that restarted
    /// empty). If the store fails again, the next reconnect asks again.
    async fn revalidate(&self) {
        let Some(store) = &self.shared else {
            return;
        };
        let sessions = self.sessions.all();
        let keys: Vec<String> = sessions.iter().map(|s| s.store_key().to_owned()).collect();
        let Some(exist) = store.exist(&keys).await else {
            return;
        };
        let mut ended = 0;
        for (s, exists) in sessions.iter().zip(exist) {
            if !exists {
                ended += 1;
                self.end_session(s).await;
            }
        }
        tracing::info!(
            checked = sessions.len(),
            ended,
            "cached sessions revalidated against the shared store"
        );
    }

    /// Lets a session go at shutdown while other replicas serve it: its
    /// streams close and what was in flight here ends, its per-session stdio
    /// children are stopped (their state cannot move), but its record stays in
    /// the shared store and HTTP backends keep their sessions (no `DELETE`
    /// upstream).
    pub(super) async fn release_session(&self, session: &Arc<Session>) {
        self.relay
            .subscriptions()
            .drop_session(&self.catalog, session);
        let (slots, _calls) = session.end();
        self.forget_opened(session);
        let releasing = slots
            .iter()
            .filter_map(|s| s.take())
            .map(|conn| async move { conn.release().await });
        futures_util::future::join_all(releasing).await;
    }
}
