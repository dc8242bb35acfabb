//! Room for a new per-session connection when a limit is reached: rather than
//! refusing the call while idle sessions (no `DELETE`, not yet expired) hold the
//! client's `max_connections_per_client` or the backend's `max_connections`,
//! the least recently used session connection that is reclaimable is closed —
//! of the same client for the client's share; for the backend's budget, of the
//! same client too when it has one (were its client at its share, another
//! client's would not let the call in and both would go), else of any client.
//! Reclaimable: unused for at least the backend's `reclaim_idle_after`,
//! no call in flight on it, and no subscription or task of its session on that
//! backend (state a fresh connection could not take over); checked and taken
//! under the slot's lock, under which a call is handed the connection and
//! touches it (so one handed out in the last second is never taken, even with
//! a shorter `reclaim_idle_after`). Its session keeps
//! working: its next call opens a fresh connection, given the session's log
//! level (and subscriptions, none here) again (`sessions.rs`,
//! `Supervisor::reestablish`), as after an `idle_timeout` close or a crash.
//! Logged at INFO, counted in `mcpgate_backend_connections_reclaimed_total`.
//! Pooled connections (stateless requests) are not taken: they close after
//! `pool_idle_timeout` by themselves.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Supervisor;
use super::sessions::holds_state;
use crate::auth::ClientKey;
use crate::backend::{Connection, Slot};
use crate::catalog::{BackendState, ConnectionRefusal, ConnectionTicket};
use crate::session::Session;

/// At most this many connections are reclaimed for one new connection (one for
/// the client's share, one for the backend's budget).
const MAX_RECLAIMS: usize = 2;

/// A connection handed to a call this recently is never reclaimed, whatever
/// `reclaim_idle_after` says: the call's request may not be in flight yet
/// (handing out touches the connection, `Slot::current_for_use`).
const HANDED_OUT_GRACE: Duration = Duration::from_secs(1);

/// How often a reservation is retried while a reclaimed connection closes (its
/// ticket is dropped once it has).
const CLOSE_CHECK: Duration = Duration::from_millis(5);

/// The best connection to reclaim found so far.
struct Candidate {
    idle: Duration,
    session: Arc<Session>,
    slot: Arc<Slot>,
    conn: Arc<Connection>,
}

impl Supervisor {
    /// Counts a connection about to open on `b` for `client`, as
    /// [`BackendState::reserve_connection`] does, but over a limit first closes
    /// a reclaimable connection (module docs) and waits until it has (at most
    /// the backend's `queue_timeout`).
    ///
    /// Errors: the refusal when nothing is reclaimable, or when the room made
    /// was not there within `queue_timeout` (taken by another call meanwhile).
    pub(super) async fn reserve_or_reclaim(
        &self,
        b: &Arc<BackendState>,
        client: Option<&ClientKey>,
    ) -> Result<ConnectionTicket, ConnectionRefusal> {
        let mut refusal = match b.reserve_connection(client) {
            Ok(ticket) => return Ok(ticket),
            Err(r) => r,
        };
        let deadline = Instant::now() + b.spec.config.queue_timeout;
        let mut reclaimed = 0;
        let mut closing: Option<Arc<Connection>> = None;
        // Checks after the reclaimed connection closed: its ticket is dropped
        // by a task of its own, a moment later.
        let mut after_close = 0;
        loop {
            if let Some(c) = &closing
                && !c.is_alive()
            {
                after_close += 1;
            }
            if closing.is_none() || after_close > 3 {
                let whose = match &refusal {
                    ConnectionRefusal::Client(_) => client,
                    // The caller's own first: when its client is at its share
                    // too, another client's would not let it in.
                    ConnectionRefusal::Backend(_) => client,
                    ConnectionRefusal::Pool(_) => return Err(refusal),
                };
                if reclaimed >= MAX_RECLAIMS {
                    return Err(refusal);
                }
                let reason = refusal.reason();
                let found = self.reclaim_one(b, whose, reason).or_else(|| {
                    let any = matches!(refusal, ConnectionRefusal::Backend(_)) && whose.is_some();
                    any.then(|| self.reclaim_one(b, None, reason)).flatten()
                });
                let Some(conn) = found else {
                    return Err(refusal);
                };
                reclaimed += 1;
                closing = Some(conn);
                after_close = 0;
            }
            if Instant::now() >= deadline {
                return Err(refusal);
            }
            tokio::time::sleep(CLOSE_CHECK).await;
            match b.reserve_connection(client) {
                Ok(ticket) => return Ok(ticket),
                Err(r) => refusal = r,
            }
        }
    }

    /// Closes (in the background) the least recently used reclaimable session
    /// connection to `b` of `client` (`None`: of any client); the one closed.
    fn reclaim_one(
        &self,
        b: &BackendState,
        client: Option<&ClientKey>,
        reason: &'static str,
    ) -> Option<Arc<Connection>> {
        let min_idle = b.spec.config.reclaim_idle_after.max(HANDED_OUT_GRACE);
        let mut best: Option<Candidate> = None;
        for s in self.sessions.all() {
            if client.is_some() && ClientKey::of(s.principal(), s.client()).as_ref() != client {
                continue;
            }
            let Some((_, slot)) = s.slots().into_iter().find(|(i, _)| *i == b.index) else {
                continue;
            };
            let Some(conn) = slot.current() else {
                continue;
            };
            let idle = conn.idle_for();
            if conn.calls_in_flight() > 0
                || idle < min_idle
                || best.as_ref().is_some_and(|b| b.idle >= idle)
                || holds_state(&s.record(), &b.spec.name)
            {
                continue;
            }
            best = Some(Candidate {
                idle,
                session: s,
                slot,
                conn,
            });
        }
        let Candidate {
            idle,
            session,
            slot,
            conn,
        } = best?;
        // Still the session's, and still unused: take it out of the slot, under
        // the lock a call is handed it under.
        if !slot.take_idle(&conn, min_idle) {
            return None;
        }
        self.metrics
            .backend_connections_reclaimed
            .with_label_values(&[&b.spec.name, reason])
            .inc();
        let owner = ClientKey::of(session.principal(), session.client()).map(|k| k.to_string());
        tracing::info!(backend = %b.spec.name, session = %session.log_id(),
            client = owner.as_deref().unwrap_or("unknown"), idle_secs = idle.as_secs(), limit = reason,
            "an idle per-session connection was closed to make room (reclaim_idle_after); its session's next call opens a fresh one");
        let shared = self.shared.is_some();
        let closing = conn.clone();
        tokio::spawn(async move {
            // With a store, a session's HTTP backend session is shared: it
            // stays for the other replicas and for the next connection.
            match shared {
                true => closing.release().await,
                false => closing.close().await,
            }
        });
        Some(conn)
    }
}
