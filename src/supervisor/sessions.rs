//! Host sessions' backend state over time: the connection that serves a session
//! on a backend (opened on first use for per-session backends), the end of a
//! session, and idle expiry.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Supervisor;
use crate::backend::{BackendError, Connection, Owner};
use crate::config::ConnectionMode;
use crate::jsonrpc;
use crate::session::{Session, UpstreamSession};

/// How long ending a session waits for a backend to take a cancel (or a host
/// stream to take its last answer) before going on.
const CANCEL_DELIVERY: Duration = Duration::from_secs(2);

impl Supervisor {
    /// The connection that serves `session` on backend `idx`: the shared one, or
    /// the session's own (created on first use, declaring only the client
    /// capabilities the host declared).
    ///
    /// Errors: the backend was removed, is over `max_connections` (busy), or cannot
    /// be reached; the session ended while connecting.
    pub async fn connection_for(
        &self,
        idx: usize,
        session: &Arc<Session>,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = self.catalog.backend(idx);
        if b.is_removed() {
            return Err(BackendError::closed(
                &b.spec.name,
                "removed by a configuration reload",
            ));
        }
        let handler = self.relay.handler();
        if b.mode == ConnectionMode::Shared {
            return b
                .shared()
                .get(&b.spec, Owner::Shared, handler, json!({}))
                .await;
        }
        let slot = session
            .slot(idx)
            .ok_or_else(|| BackendError::closed(&b.spec.name, "session state poisoned"))?;
        if let Some(conn) = slot.current() {
            return Ok(conn);
        }
        b.check_connection_limit()?;
        let caps = client_capabilities_for_backend(session.client_capabilities());
        let owner = Owner::Exclusive(session.id().clone());
        let conn = slot.get(&b.spec, owner, handler, caps).await?;
        b.count_connection(&conn);
        if session.is_ended() {
            conn.close().await;
            return Err(BackendError::closed(&b.spec.name, "session ended"));
        }
        let upstream = conn
            .upstream_session()
            .map(|(id, version)| UpstreamSession { id, version });
        session.set_upstream_session(&b.spec.name, upstream);
        Ok(conn)
    }

    /// Ends a session: forgets it, cancels its calls upstream and closes its
    /// backend connections (HTTP `DELETE` upstream, stdio children stopped).
    /// Each cancel is delivered before the connection closes, so an HTTP backend
    /// hears `notifications/cancelled` before the session's `DELETE`.
    pub async fn end_session(&self, session: &Arc<Session>) {
        self.sessions.remove(session.id());
        self.relay
            .subscriptions()
            .drop_session(&self.catalog, session);
        let (slots, calls) = session.end();
        let cancels =
            calls
                .iter()
                .filter_map(|call| call.upstream())
                .map(|(conn, id)| async move {
                    conn.cancel_awaited(id, "session ended", CANCEL_DELIVERY)
                        .await;
                });
        futures_util::future::join_all(cancels).await;
        let closing = slots
            .iter()
            .filter_map(|s| s.take())
            .map(|conn| async move {
                conn.close().await;
            });
        futures_util::future::join_all(closing).await;
    }

    /// Answers every host call still in flight on `session` with a JSON-RPC
    /// error (its stream ends with a response, not a cut) and cancels it
    /// upstream, waiting until each backend took the cancel. For shutdown, when
    /// the grace period is over.
    pub(super) async fn abandon_calls(&self, session: &Arc<Session>) {
        let calls = session.calls().into_iter().filter_map(|call| {
            session.take_call(&call.id)?;
            Some(async move {
                let upstream = call.upstream();
                let backend = upstream.as_ref().map_or("mcpgate", |(c, _)| &*c.backend);
                let e = BackendError::closed(
                    backend,
                    "the gateway is shutting down and the call did not finish within \
                     server.shutdown_grace",
                );
                let bytes = jsonrpc::error_bytes(Some(&call.id), &e.to_error_object());
                call.finish_flushed(bytes.into(), CANCEL_DELIVERY).await;
                if let Some((conn, id)) = upstream {
                    conn.cancel_awaited(id, "gateway shutting down", CANCEL_DELIVERY)
                        .await;
                }
            })
        });
        futures_util::future::join_all(calls).await;
    }

    /// Host requests in flight across all sessions.
    pub fn calls_in_flight(&self) -> usize {
        self.sessions
            .all()
            .iter()
            .map(|s| s.calls_in_flight())
            .sum()
    }

    /// Closes per-session backend connections unused for longer than their
    /// backend's `idle_timeout` (they reopen on the next call).
    async fn close_idle_connections(&self) {
        let mut idle = Vec::new();
        for s in self.sessions.all() {
            for (idx, slot) in s.slots() {
                let limit = self.catalog.backend(idx).spec.config.idle_timeout;
                if let Some(c) = slot.current()
                    && c.in_flight() == 0
                    && c.idle_for() > limit
                {
                    idle.push((slot.clone(), c));
                }
            }
        }
        for (slot, conn) in idle {
            if slot.current().is_some_and(|c| Arc::ptr_eq(&c, &conn)) {
                slot.take();
                tracing::debug!(backend = %conn.backend, "closing an idle per-session connection");
                conn.close().await;
            }
        }
    }

    /// Ends sessions idle longer than the configured timeout.
    pub async fn expire_idle(&self) {
        self.close_idle_connections().await;
        let expired = self.sessions.take_expired(
            tokio::time::Instant::now(),
            self.server.session_idle_timeout,
        );
        for s in expired {
            tracing::info!(session = %s.log_id(), "session expired");
            self.end_session(&s).await;
        }
    }
}

/// The client capabilities a per-session backend connection declares: only those
/// the host declared and the gateway relays (MCP 2025-11-25 checklist §8.5).
fn client_capabilities_for_backend(host: &Value) -> Value {
    let mut caps = serde_json::Map::new();
    for key in ["roots", "sampling", "elicitation"] {
        if let Some(v) = host.get(key).filter(|v| v.is_object()) {
            caps.insert(key.into(), v.clone());
        }
    }
    Value::Object(caps)
}
