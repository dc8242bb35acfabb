//! Hosts' backend state over time: the connection that serves a host on a backend
//! (a session's own, opened on first use, for per-session backends; a pooled one
//! for stateless 2026-07-28 requests), the end of a session, and idle expiry.
//!
//! A session's own connection lives as long as its session unless the backend
//! sets `idle_timeout` (never below `server.session_idle_timeout`, checked in
//! config); even then one holding the session's subscriptions or tasks on that
//! backend is not closed. One that replaces an earlier connection of the session
//! (closed for idleness, or lost) is given the session's state again. A
//! session's first connection to a backend is counted against the backend's
//! `max_connections` and its client's `max_connections_per_client`; over
//! either, an idle connection is reclaimed (`reclaim.rs`) or, when none is,
//! the call gets "busy". Pooled connections are `pool.rs`'s.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Supervisor;
use crate::backend::{BackendError, Connection, Owner};
use crate::catalog::BackendState;
use crate::jsonrpc;
use crate::mcp::Method;
use crate::session::{Host, Session, SessionRecord, UpstreamSession};

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
        // A stateless request has no session: it is as new as the request.
        let created = match host {
            Host::Legacy(session) => session.created(),
            Host::Modern(_) => tokio::time::Instant::now(),
        };
        let live = if b.shares_with(created) {
            b.shared().current()
        } else {
            match host {
                // Touched as it is handed out: reclaim does not take it as idle.
                Host::Legacy(session) => session.slot(idx).and_then(|s| s.current_for_use()),
                Host::Modern(_) => None,
            }
        };
        if let Some(conn) = live {
            return Ok(conn);
        }
        // Boxed: opening a connection is rare and its future large.
        Box::pin(self.open_connection(idx, host, created)).await
    }

    /// [`Supervisor::connection_for`] when no live connection serves `host`:
    /// the shared one (re)connected, or the session's own opened.
    async fn open_connection(
        &self,
        idx: usize,
        host: &Host,
        created: tokio::time::Instant,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = self.catalog.backend(idx);
        let handler = self.relay.handler();
        if b.shares_with(created) {
            let caps = shared_capabilities();
            return b.shared().get(&b.spec, Owner::Shared, handler, caps).await;
        }
        let session = match host {
            Host::Legacy(session) => session,
            Host::Modern(m) => return self.pooled_connection(idx, m).await,
        };
        let slot = session
            .slot(idx)
            .ok_or_else(|| BackendError::closed(&b.spec.name, "session state poisoned"))?;
        if let Some(conn) = slot.current_for_use() {
            return Ok(conn);
        }
        // Concurrent first uses wait for one opening: only it is counted.
        let _opening = slot.opening().await;
        if let Some(conn) = slot.current_for_use() {
            return Ok(conn);
        }
        let client = host.client_key();
        let ticket = self
            .reserve_or_reclaim(&b, client.as_ref())
            .await
            .map_err(|r| self.refuse(&b, client.as_ref(), r))?;
        let caps = client_capabilities_for_backend(session.client_capabilities());
        let owner = Owner::Exclusive(session.id().clone());
        let resume = match &self.upstreams {
            Some(u) => u.resume_for(session, &b).await,
            None => None,
        };
        let known = resume
            .as_ref()
            .and_then(|r| r.recorded.as_ref().map(|u| u.id.clone()));
        let known = known.or_else(|| {
            let record = session.record();
            record
                .upstream_sessions
                .get(&*b.spec.name)
                .map(|u| u.id.clone())
        });
        let recorder = resume.as_ref().map(|r| r.recorder.clone());
        let conn = match resume {
            Some(resume) => {
                slot.get_recorded(&b.spec, owner, handler, caps, resume)
                    .await?
            }
            None => slot.get(&b.spec, owner, handler, caps).await?,
        };
        let Some(replaced) = self.note_opened(session, idx, &conn) else {
            // A concurrent first use opened it and sets it up.
            return Ok(conn);
        };
        BackendState::count_connection(&conn, ticket);
        if session.is_ended() {
            self.forget_opened(session);
            conn.close().await;
            return Err(BackendError::closed(&b.spec.name, "session ended"));
        }
        self.note_child(session, &b);
        let record = session.record();
        if let Some(r) = recorder {
            super::upstream::record_opened(&r, &conn, known).await;
        }
        session.set_upstream_session(&b.spec.name, upstream_of(&conn));
        // A 2026-07-28 backend tells its lists' changes on a listen: this
        // connection's may be this session's alone (`catalog/own.rs`).
        crate::backend::watch_lists(&conn);
        self.reestablish(&b, session, &record, &conn, replaced)
            .await;
        Ok(conn)
    }

    /// Records `conn` as `session`'s connection to backend `idx`: `None` if it
    /// already was, else whether it replaces an earlier one.
    fn note_opened(&self, session: &Session, idx: usize, conn: &Arc<Connection>) -> Option<bool> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        let key = (session.id().clone(), idx);
        match opened.insert(key, Arc::downgrade(conn)) {
            Some(before) if std::ptr::eq(before.as_ptr(), Arc::as_ptr(conn)) => None,
            before => Some(before.is_some()),
        }
    }

    /// Forgets which connections `session` had opened (it ended).
    pub(super) fn forget_opened(&self, session: &Session) {
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| id != session.id());
    }

    /// A new per-session connection gets the session state the gateway knows: its
    /// log level (always: a level set before the connection existed must reach it
    /// too) and, when it replaces an earlier connection of this session (closed
    /// for idleness, or lost), the session's subscriptions on this backend. A
    /// replacement is logged: what else the backend kept for the session (its
    /// own session, in-memory state) is gone.
    async fn reestablish(
        &self,
        b: &BackendState,
        session: &Session,
        record: &SessionRecord,
        conn: &Arc<Connection>,
        replaced: bool,
    ) {
        let timeout = conn.timeout();
        if let Some(level) = record.log_level
            && conn.info().is_some_and(|i| i.has("logging"))
        {
            let params = json!({ "level": level.as_str() });
            if let Err(e) = conn
                .request(&Method::LoggingSetLevel, Some(params), None, timeout)
                .await
            {
                tracing::debug!(backend = %b.spec.name, cause = %e, "logging/setLevel refused");
            }
        }
        if !replaced {
            return;
        }
        let uris = record
            .subscriptions
            .iter()
            .filter(|(backend, _)| **backend == *b.spec.name)
            .map(|(_, uri)| uri);
        let mut resubscribed = 0;
        for uri in uris {
            let params = json!({ "uri": uri });
            match conn
                .request(&Method::ResourcesSubscribe, Some(params), None, timeout)
                .await
            {
                Ok(_) => resubscribed += 1,
                Err(e) => {
                    tracing::warn!(backend = %b.spec.name, session = %session.log_id(), cause = %e, "resubscribing on a replaced connection failed")
                }
            }
        }
        let previous = record.upstream_sessions.get(&*b.spec.name);
        tracing::warn!(
            backend = %b.spec.name,
            session = %session.log_id(),
            previous_backend_session = previous.map(|u| u.id.as_str()),
            log_level = record.log_level.map(|l| l.as_str()),
            resubscribed,
            "per-session backend connection replaced; log level and subscriptions set again, any other state the backend kept for this session is gone"
        );
    }

    /// Ends a session: forgets it, cancels its calls upstream and closes its
    /// backend connections (HTTP `DELETE` upstream, stdio children stopped).
    /// Each cancel is delivered before the connection closes, so an HTTP backend
    /// hears `notifications/cancelled` before the session's `DELETE`.
    pub async fn end_session(&self, session: &Arc<Session>) {
        self.end_session_with(session, true).await;
    }

    /// [`Supervisor::end_session`] for a session that another replica ended
    /// (or that is idle only here), which ends (or keeps) the Streamable HTTP
    /// backends' sessions: no `DELETE` upstream from here.
    pub async fn end_session_here(&self, session: &Arc<Session>) {
        self.end_session_with(session, false).await;
    }

    async fn end_session_with(&self, session: &Arc<Session>, delete_upstream: bool) {
        self.sessions.remove(session.id());
        let subscribed = (self.relay.subscriptions()).drop_session(&self.catalog, session);
        if !delete_upstream {
            // It may live on elsewhere: another replica takes them.
            self.vacate_subscriptions(session, subscribed).await;
        }
        self.catalog.forget_own(session.id());
        // Every request gets a response: a call still in flight is answered with
        // an error on its stream (and cancelled upstream) before the streams end.
        let reason = "the session ended (DELETE or expiry) while this call was in flight; \
                      it was cancelled at the backend";
        self.answer_and_cancel(session, reason, "session ended")
            .await;
        let (slots, calls) = session.end();
        // After `end`: a connection opened concurrently either is forgotten here
        // or sees the session ended and forgets itself.
        self.forget_opened(session);
        let cancels =
            calls
                .iter()
                .filter_map(|call| call.upstream())
                .map(|(conn, id)| async move {
                    conn.cancel_awaited(id, "session ended", CANCEL_DELIVERY)
                        .await;
                });
        futures_util::future::join_all(cancels).await;
        let conns: Vec<_> = slots.iter().filter_map(|s| s.take()).collect();
        let closed_here: Vec<String> = conns
            .iter()
            .filter_map(|c| Some(c.upstream_session()?.0))
            .collect();
        let closing = conns.into_iter().map(|conn| async move {
            match delete_upstream {
                true => conn.close().await,
                false => conn.release().await,
            }
        });
        futures_util::future::join_all(closing).await;
        // Its children are stopped: another replica may start the next one.
        self.disown(session).await;
        if let Some(u) = self.upstreams.as_ref().filter(|_| delete_upstream) {
            u.end_recorded(session, &closed_here).await;
        }
    }

    /// Answers every host call still in flight on `session` with a JSON-RPC
    /// error (its stream ends with a response, not a cut) and cancels it
    /// upstream, waiting until each backend took the cancel. For shutdown, when
    /// the grace period is over.
    pub(super) async fn abandon_calls(&self, session: &Arc<Session>) {
        let reason = "the gateway is shutting down and the call did not finish within \
                      server.shutdown_grace";
        self.answer_and_cancel(session, reason, "gateway shutting down")
            .await;
    }

    /// Answers each host call in flight on `session` with -32603 (`message`,
    /// `data.backend`), waiting at most `CANCEL_DELIVERY` until its stream took
    /// the answer, and sends its backend `notifications/cancelled` with
    /// `cancel_reason`.
    async fn answer_and_cancel(&self, session: &Arc<Session>, message: &str, cancel_reason: &str) {
        let calls = session.calls().into_iter().filter_map(|call| {
            session.take_call(&call.id)?;
            Some(async move {
                let upstream = call.upstream();
                let backend = upstream.as_ref().map_or("mcpgate", |(c, _)| &*c.backend);
                tracing::info!(session = %session.log_id(), id = %call.id.logged(), backend,
                    "{cancel_reason}: an in-flight call answered with an error");
                let e = BackendError::closed(backend, message);
                let bytes = jsonrpc::error_bytes(Some(&call.id), &e.to_error_object());
                call.finish_flushed(bytes.into(), CANCEL_DELIVERY).await;
                if let Some((conn, id)) = upstream {
                    conn.cancel_awaited(id, cancel_reason, CANCEL_DELIVERY)
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

    /// Closes backend connections unused for longer than their backend's
    /// idle limit (they reopen on the next call): a session's own only if the
    /// backend sets `idle_timeout` and the session holds no subscriptions or
    /// tasks there; pooled ones after `pool_idle_timeout`.
    async fn close_idle_connections(&self) {
        let pooled = self
            .pool
            .take_idle(|idx| self.catalog.backend(idx).spec.config.pool_idle_timeout);
        for conn in pooled {
            tracing::info!(backend = %conn.backend, "closing an idle pooled connection (pool_idle_timeout)");
            conn.close().await;
        }
        let mut idle = Vec::new();
        for s in self.sessions.all() {
            let mut record = None;
            for (idx, slot) in s.slots() {
                let b = self.catalog.backend(idx);
                let Some(limit) = b.spec.config.idle_timeout else {
                    continue;
                };
                if let Some(c) = slot.current()
                    && c.calls_in_flight() == 0
                    && c.idle_for() > limit
                    && !holds_state(record.get_or_insert_with(|| s.record()), &b.spec.name)
                {
                    idle.push((slot.clone(), c, limit));
                }
            }
        }
        for (slot, conn, limit) in idle {
            // Checked again under the slot's lock: a call may have been handed
            // it meanwhile.
            if slot.take_idle(&conn, limit) {
                tracing::info!(backend = %conn.backend, "closing an idle per-session connection (idle_timeout)");
                // With a store, a session's HTTP backend session is shared:
                // it stays for the other replicas and for the next connection.
                match self.shared.is_some() {
                    true => conn.release().await,
                    false => conn.close().await,
                }
            }
        }
    }

    /// Ends sessions idle longer than the configured timeout.
    pub async fn expire_idle(&self) {
        self.close_idle_connections().await;
        let expired = self.sessions.take_expired(
            tokio::time::Instant::now(),
            self.server.load().session_idle_timeout,
        );
        // With a shared store, a session idle here may be in use elsewhere
        // (its record lives on): its backend sessions stay.
        let keys: Vec<String> = expired.iter().map(|s| s.store_key().to_owned()).collect();
        let live = match &self.shared {
            Some(store) if !keys.is_empty() => store.exist(&keys).await,
            _ => Some(vec![false; keys.len()]),
        };
        for (i, s) in expired.iter().enumerate() {
            tracing::info!(session = %s.log_id(), "session expired");
            match live.as_ref().is_none_or(|l| l.get(i) == Some(&true)) {
                true => self.end_session_here(s).await,
                false => self.end_session(s).await,
            }
        }
        // After a mass expiry, free the sessions on a thread of their own, then
        // have every worker flush its allocator cache (src/memory.rs). Freed on a
        // worker, up to ~200 objects per size class stay in its cache, scattered
        // (table order) over slabs that then stay resident (~5 MB after 10,000
        // sessions).
        if expired.len() >= 64 {
            let runtime = tokio::runtime::Handle::current();
            let _ = std::thread::Builder::new()
                .name("mcpgate-free".into())
                .spawn(move || {
                    drop(expired);
                    crate::memory::release_everywhere(&runtime);
                });
        }
    }

    /// Lets a session go at shutdown while other replicas serve it: its
    /// streams close and what was in flight here ends, its per-session stdio
    /// children are stopped (their state cannot move) and its ownership
    /// released (the next replica that needs a child claims it), but its
    /// record stays in the shared store and HTTP backends keep their sessions
    /// (no `DELETE` upstream).
    pub(super) async fn release_session(&self, session: &Arc<Session>) {
        let subscribed = (self.relay.subscriptions()).drop_session(&self.catalog, session);
        self.vacate_subscriptions(session, subscribed).await;
        let (slots, _calls) = session.end();
        self.forget_opened(session);
        let releasing = slots
            .iter()
            .filter_map(|s| s.take())
            .map(|conn| async move { conn.release().await });
        futures_util::future::join_all(releasing).await;
        // Its children are stopped: the next replica that needs one claims it.
        self.disown(session).await;
    }
}

/// `conn`'s backend session as the session record keeps it.
fn upstream_of(conn: &Connection) -> Option<UpstreamSession> {
    let r = conn.recorded_session()?;
    Some(UpstreamSession {
        id: r.id,
        version: r.version,
        capabilities: r.capabilities,
    })
}

/// Whether the session keeps state on backend `backend` that a new connection
/// could not take over: subscriptions (updates would be missed meanwhile) or
/// tasks (the backend holds their results).
pub(super) fn holds_state(record: &SessionRecord, backend: &str) -> bool {
    record.subscriptions.iter().any(|(b, _)| b == backend)
        || record.tasks.values().any(|t| t.backend == backend)
}

/// The client capabilities a backend's shared connection (shared and auto mode)
/// and a per-session backend's catalogue connection declare: everything the
/// gateway relays, so that backends offer every feature that needs a host. On a
/// shared connection each such request reaches the one host call in flight on
/// it, if that host declared the capability, and is refused otherwise
/// (`backend/conn.rs`, `relay/requests.rs`); the catalogue connection serves no
/// host call, so what it is asked is refused. Its catalogue therefore lists the
/// tools a backend offers only to capable clients (a host that did not declare
/// the capability gets its own backend session's answer when it calls one).
pub(super) fn shared_capabilities() -> Value {
    json!({"roots": {}, "sampling": {}, "elicitation": {"form": {}, "url": {}}})
}

/// The client capabilities a per-session backend connection declares: only those
/// the host declared and the gateway relays (MCP 2025-11-25 checklist §8.5).
pub(super) fn client_capabilities_for_backend(host: &Value) -> Value {
    let mut caps = serde_json::Map::new();
    for key in ["roots", "sampling", "elicitation"] {
        if let Some(v) = host.get(key).filter(|v| v.is_object()) {
            caps.insert(key.into(), v.clone());
        }
    }
    Value::Object(caps)
}
