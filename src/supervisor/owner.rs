//! Which replica runs a session's per-session stdio children, as this
//! replica sees it (issue 11 item 4; the claim itself is
//! `cluster::OwnerStore::claim`, the forwarding `http/owner.rs`): a
//! session this replica owns is marked so (its requests then make no store
//! command), a session it lets go (ended, expired here, released at a drain)
//! is released in the store, and each child it starts for an owned session is
//! noted there, so an adopter knows whose state died with this replica.
//!
//! Fencing: a replica whose heartbeat has not reached the store for its TTL
//! (`cluster::Ctl::Fenced`) may have had its sessions adopted elsewhere, so
//! it drops every owned mark (a request then claims again: `http/owner.rs`).
//! When the store answers again (`Ctl::Unfenced`) it reads `own` of those
//! sessions (one pipelined `HGET` each): still ours → owned again; another
//! replica's, or nobody's → their per-session stdio children here stop (the
//! new owner runs its own; their state has split).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;

use super::Supervisor;
use crate::catalog::BackendState;
use crate::cluster::OwnedSubscription;
use crate::config::Transport;
use crate::mcp::Method;
use crate::session::{Host, Session};

impl Supervisor {
    /// Marks `session` as owned here (`mcpgate_sessions_owned`). A session
    /// that ended meanwhile (its end let go before this mark) is let go again
    /// at once, in the store too (not awaited): the gauge counts live
    /// sessions only.
    pub fn own(&self, session: &Session) {
        if !session.set_owned(true) {
            return;
        }
        self.metrics.sessions_owned.inc();
        if session.is_ended()
            && self.unmark(session)
            && let Some(store) = self.shared.clone()
        {
            let h = session.store_key().to_owned();
            tokio::spawn(async move {
                let _ = store.owner().release(&h).await;
            });
        }
    }

    /// Marks `session` as owned here after a claim that took it from no owner
    /// or from a dead one, and subscribes its new children again to
    /// `subscriptions` (the record's): each backend's child is started now
    /// (awaited) and subscribed, so updates flow again without waiting for a
    /// request to that backend. A failure is logged; the request goes on.
    pub async fn take_over(&self, session: &Arc<Session>, subscriptions: Vec<OwnedSubscription>) {
        self.own(session);
        let mut by_backend: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (name, uri) in subscriptions {
            let Some(b) = self.catalog.backends().by_name(&name) else {
                continue;
            };
            if b.is_removed() || !self.is_owner_bound(b.index, session) {
                continue;
            }
            self.relay.subscriptions().subscribe(&b, &uri, session);
            by_backend.entry(b.index).or_default().push(uri);
        }
        let host = Host::Legacy(session.clone());
        for (idx, uris) in by_backend {
            let conn = match self.connection_for(idx, &host).await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(session = %session.log_id(), cause = %e, "subscriptions not set again: the backend did not start");
                    continue;
                }
            };
            let timeout = conn.timeout();
            for uri in uris {
                let params = json!({ "uri": uri });
                if let Err(e) = conn
                    .request(&Method::ResourcesSubscribe, Some(params), None, timeout)
                    .await
                {
                    tracing::warn!(backend = %conn.backend, session = %session.log_id(), cause = %e, "resubscribing a taken-over session failed");
                }
            }
            tracing::info!(backend = %conn.backend, session = %session.log_id(), "a taken-over session's subscriptions set again on its new child");
        }
    }

    /// Records in the store that `session` subscribed to (`on`) or
    /// unsubscribed from `uri` of backend `b`, when `b` runs a child per
    /// session for it (one store command, awaited; a failure is logged: the
    /// subscription holds here, a later owner misses it).
    pub async fn record_subscription(
        &self,
        session: &Session,
        b: &BackendState,
        uri: &str,
        on: bool,
    ) {
        let Some(store) = &self.shared else {
            return;
        };
        if !self.is_owner_bound(b.index, session) {
            return;
        }
        let h = session.store_key();
        if store
            .owner()
            .record_subscription(h, &b.spec.name, uri, on)
            .await
            .is_err()
        {
            tracing::debug!(session = %session.log_id(), backend = %b.spec.name, "subscription not recorded: the shared store did not answer");
        }
    }

    /// Unmarks `session` as owned here, without telling the store (the
    /// caller releases it); whether it was.
    pub fn unmark(&self, session: &Session) -> bool {
        let was = session.set_owned(false);
        if was {
            self.metrics.sessions_owned.dec();
        }
        was
    }

    /// Whether backend `idx` runs a child per session for `session` here: a
    /// stdio backend that does not share its connection with it.
    pub fn is_owner_bound(&self, idx: usize, session: &Session) -> bool {
        let b = self.catalog.backend(idx);
        matches!(b.spec.config.transport, Transport::Stdio { .. })
            && !b.shares_with(session.created())
    }

    /// Whether any configured backend may run a child per session (without
    /// one no request is owner-bound).
    pub fn has_owner_bound(&self) -> bool {
        self.catalog.backends().snapshot().iter().any(|b| {
            !b.is_removed()
                && matches!(b.spec.config.transport, Transport::Stdio { .. })
                && b.mode != crate::config::ConnectionMode::Shared
        })
    }

    /// Lets go of `session`'s ownership, if this replica held it: unmarked
    /// here and released in the store (awaited, at most the store's
    /// deadline).
    pub(super) async fn disown(&self, session: &Session) {
        if !self.unmark(session) {
            return;
        }
        if let Some(store) = &self.shared
            && store.owner().release(session.store_key()).await.is_err()
        {
            tracing::debug!(session = %session.log_id(), "ownership not released: the shared store did not answer (it passes on when this replica's heartbeat expires)");
        }
    }

    /// Notes in the store that this replica, owning `session`, started a
    /// child of `b` (not awaited).
    pub(super) fn note_child(&self, session: &Session, b: &BackendState) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        if !session.is_owned() || !matches!(b.spec.config.transport, Transport::Stdio { .. }) {
            return;
        }
        let (h, name) = (session.store_key().to_owned(), b.spec.name.clone());
        tokio::spawn(async move {
            let _ = store.owner().note_child(&h, &name).await;
        });
    }

    /// Turns every owned mark into a fenced one (this replica is fenced:
    /// another may adopt its sessions; `Session::may_own`: a cancel or roots
    /// change still reaches the children, which keep running) and remembers
    /// those sessions for [`Supervisor::unfence`].
    pub(super) fn fence(&self) {
        let dropped: Vec<Arc<Session>> = self
            .sessions
            .all()
            .into_iter()
            .filter(|s| {
                let was = s.fence_owned();
                if was {
                    self.metrics.sessions_owned.dec();
                }
                was
            })
            .collect();
        tracing::warn!(
            sessions = dropped.len(),
            "fenced: owned sessions unmarked, their requests claim again"
        );
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(dropped);
    }

    /// After a fence, the store answers again: each session owned here before
    /// that is still live and still `own`ed by this replica is owned again;
    /// the others' per-session stdio children here stop. If the store fails
    /// again before it answers, the next [`Supervisor::unfence`] retries.
    pub(super) async fn unfence(&self) {
        let held: Vec<Arc<Session>> =
            std::mem::take(&mut *self.fenced.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .filter(|s| !s.is_ended())
                .collect();
        let Some(store) = &self.shared else {
            return;
        };
        let keys: Vec<String> = held.iter().map(|s| s.store_key().to_owned()).collect();
        let Some(owners) = store.owner().of_each(&keys).await else {
            tracing::info!(
                sessions = held.len(),
                "fenced sessions not checked: the shared store failed again"
            );
            let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
            fenced.extend(held);
            return;
        };
        let (mut kept, mut lost) = (0, 0);
        for (s, own) in held.iter().zip(owners) {
            if own.as_deref() == Some(store.tag()) {
                self.own(s);
                kept += 1;
            } else {
                tracing::info!(session = %s.log_id(), owner = ?own,
                    "a session owned here before the fence has another owner now: its backend processes here stop");
                s.set_owned(false);
                self.stop_children(s).await;
                lost += 1;
            }
        }
        tracing::info!(
            kept,
            lost,
            "fenced sessions checked against the shared store"
        );
    }

    /// Stops `session`'s per-session stdio children here (their slots are
    /// emptied; a call in flight on one ends with an error), keeping the
    /// session.
    async fn stop_children(&self, session: &Session) {
        let mut stopped = Vec::new();
        for (idx, slot) in session.slots() {
            if !self.is_owner_bound(idx, session) {
                continue;
            }
            if let Some(conn) = slot.take() {
                conn.close().await;
                stopped.push(idx);
            }
        }
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, idx), _| id != session.id() || !stopped.contains(idx));
    }

    /// Sets where requests handed to this replica as an owner go (once, by
    /// the HTTP face that runs them).
    pub fn forward_owner_calls(&self, tx: mpsc::UnboundedSender<(String, String)>) {
        let _ = self.owner_calls.set(tx);
    }

    /// A request another replica handed this one for session `h` (sealed).
    pub(super) fn owner_call(&self, h: String, message: String) {
        match self.owner_calls.get() {
            Some(tx) => {
                let _ = tx.send((h, message));
            }
            None => tracing::debug!("owner call dropped: nothing runs them"),
        }
    }
}
