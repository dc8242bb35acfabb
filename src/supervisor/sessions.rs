//! Hosts' backend state over time: the connection that serves a host on a backend
//! (a session's own, opened on first use, for per-session backends; a pooled one
//! for stateless 2026-07-28 requests), the end of a session, and idle expiry.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Supervisor;
use crate::backend::Slot;
use crate::backend::{BackendError, Connection, Owner};
use crate::config::ConnectionMode;
use crate::jsonrpc;
use crate::session::{Host, ModernHost, Session, UpstreamSession};

/// How long ending a session waits for a backend to take a cancel (or a host
/// stream to take its last answer) before going on.
const CANCEL_DELIVERY: Duration = Duration::from_secs(2);

impl Supervisor {
    /// The connection that serves `host` on backend `idx`: the shared one; for a
    /// per-session backend, a legacy session's own (created on first use,
    /// declaring only the client capabilities the host declared) or, for a
    /// stateless request, a pooled one ([`Supervisor::pooled_connection`]).
    ///
    /// Errors: the backend was removed, is over `max_connections` (busy), or cannot
    /// be reached; the session ended while connecting.
    pub async fn connection_for(
        &self,
        idx: usize,
        host: &Host,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = self.catalog.backend(idx);
        if b.is_removed() {
            return Err(BackendError::closed(
                &b.spec.name,
                "removed by a configuration reload",
            ));
        }
        let handler = self.relay.handler();
        // A stateless request has no session: it is as new as the request.
        let created = match host {
            Host::Legacy(session) => session.created(),
            Host::Modern(_) => tokio::time::Instant::now(),
        };
        if b.shares_with(created) {
            let caps = shared_capabilities(b.mode);
            return b.shared().get(&b.spec, Owner::Shared, handler, caps).await;
        }
        let session = match host {
            Host::Legacy(session) => session,
            Host::Modern(m) => return self.pooled_connection(idx, m).await,
        };
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

    /// A per-session backend's connection for a stateless request: backend sessions
    /// are pooled by (backend, caller, the client capabilities the request
    /// declared among roots, sampling and elicitation), so a backend never sends a
    /// request for a capability this host request did not declare, and one
    /// principal's backend session is never another's (MCP 2026-07-28 bridging:
    /// capabilities are per request on one side and per session on the other).
    /// Pooled connections serve many requests at once: what a backend sends is
    /// tied to a request only by the stream it arrives on.
    async fn pooled_connection(
        &self,
        idx: usize,
        host: &ModernHost,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = self.catalog.backend(idx);
        let caps = client_capabilities_for_backend(&host.capabilities);
        let principal = host
            .principal
            .as_ref()
            .map(|p| format!("{}\u{0}{}", p.issuer, p.subject))
            .unwrap_or_default();
        let key = (idx, format!("{principal}\u{0}{caps}"));
        let slot = {
            let Ok(mut pool) = self.pool.lock() else {
                return Err(BackendError::closed(
                    &b.spec.name,
                    "connection pool poisoned",
                ));
            };
            pool.entry(key)
                .or_insert_with(|| Arc::new(Slot::default()))
                .clone()
        };
        if let Some(conn) = slot.current() {
            return Ok(conn);
        }
        b.check_connection_limit()?;
        let conn = slot
            .get(&b.spec, Owner::Shared, self.relay.handler(), caps)
            .await?;
        b.count_connection(&conn);
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

    /// Closes per-session and pooled backend connections unused for longer than
    /// their backend's `idle_timeout` (they reopen on the next call).
    async fn close_idle_connections(&self) {
        let mut idle = Vec::new();
        let pooled: Vec<(usize, Arc<Slot>)> = self
            .pool
            .lock()
            .map(|p| p.iter().map(|((i, _), s)| (*i, s.clone())).collect())
            .unwrap_or_default();
        let sessions = self.sessions.all();
        let slots = sessions.iter().flat_map(|s| s.slots()).chain(pooled);
        for (idx, slot) in slots {
            let limit = self.catalog.backend(idx).spec.config.idle_timeout;
            if let Some(c) = slot.current()
                && c.in_flight() == 0
                && c.idle_for() > limit
            {
                idle.push((slot.clone(), c));
            }
        }
        for (slot, conn) in idle {
            if slot.current().is_some_and(|c| Arc::ptr_eq(&c, &conn)) {
                slot.take();
                tracing::debug!(backend = %conn.backend, "closing an idle per-session connection");
                conn.close().await;
            }
        }
        // Empty pool slots go, unless a request is connecting through one.
        if let Ok(mut pool) = self.pool.lock() {
            pool.retain(|_, slot| slot.current().is_some() || Arc::strong_count(slot) > 1);
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

/// The client capabilities a backend's shared connection declares. In shared
/// and auto mode: everything the gateway relays, so that backends offer the features that
/// need a host; each such request then reaches the one host call in flight on the
/// connection, if that host declared the capability, and is refused otherwise
/// (`backend/conn.rs`, `relay/requests.rs`). The catalogue connection of a
/// per-session backend acts for no client and declares nothing.
pub(super) fn shared_capabilities(mode: ConnectionMode) -> Value {
    match mode {
        ConnectionMode::PerSession => json!({}),
        ConnectionMode::Shared | ConnectionMode::Auto => {
            json!({"roots": {}, "sampling": {}, "elicitation": {"form": {}, "url": {}}})
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
