//! Resource subscriptions as the supervisor makes them (MCP 2025-11-25
//! server/resources, subscriptions): refcounted per replica by the relay
//! (`relay/subscriptions.rs`: one upstream subscribe per backend and URI on
//! a shared connection) and, with a shared store, held cluster-wide (issue
//! 11): a session's subscription on a backend other than a per-session stdio
//! one is held by one replica, named in the record (`ss:NAME:URI`,
//! `cluster/subscriptions.rs`), so that it outlives that replica.
//!
//! - A subscribe that finds a live holder elsewhere is answered `{}` and not
//!   made again (its updates reach the host through the holder, which hands
//!   them to the replica producing the standalone stream); an unsubscribe
//!   of one held elsewhere tells the holder (`ctl` `unsub`), which ends its
//!   share ([`Supervisor::unsubscribe_forwarded`]).
//! - Takeover ([`Supervisor::take_over_subscriptions`], one `EVAL`): the
//!   subscriptions of a session that are vacant or whose holder is dead
//!   become this replica's and are subscribed here. Asked by a standalone
//!   `GET` here (the host re-attaches it within seconds when its replica
//!   dies), by a session restored here whose record names another holder or
//!   none, when a holder lets a live session go (`ctl` `free`), and when a
//!   watched holder dies: a replica caching a session watches the holders
//!   it heard of (`ctl` `ss`, a subscribe that found one, the takeover's
//!   answer), one pipelined `EXISTS` per heartbeat while it watches any.
//! - A replica letting a live session go (idle here only, a drain) vacates
//!   its holds ([`Supervisor::vacate_subscriptions`]).
//!
//! Costs: nothing on other requests; one `EVAL` per subscribe, unsubscribe,
//! standalone `GET` and takeover.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::json;

use super::Supervisor;
use crate::backend::BackendError;
use crate::catalog::BackendState;
use crate::cluster::{Held, SharedStore};
use crate::jsonrpc::RawJson;
use crate::mcp::Method;
use crate::session::{Host, Session};

/// The sessions cached here whose subscriptions live replicas hold, by
/// holder tag; see the module docs.
#[derive(Default)]
pub(super) struct Holders {
    watched: Mutex<HashMap<String, Vec<Weak<Session>>>>,
    /// Whether the check task runs (it ends when nothing is watched).
    checking: AtomicBool,
}

impl Holders {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Weak<Session>>>> {
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Supervisor {
    /// `resources/subscribe` (`on`) or `resources/unsubscribe` of `session`
    /// to `uri` (the backend's) of backend `b`. With a shared store and a
    /// backend that does not run a child per session for it, the record's
    /// holder is asked first: a subscription a live replica holds is not
    /// made again here, one held elsewhere is ended there too. `Ok(None)`:
    /// nothing was asked upstream (the answer is `{}`); otherwise the
    /// backend's answer. Errors: the backend's, or its connection's.
    pub async fn subscription(
        self: &Arc<Self>,
        session: &Arc<Session>,
        b: &BackendState,
        uri: &str,
        on: bool,
    ) -> Result<Option<RawJson>, BackendError> {
        let store = (self.shared.as_ref()).filter(|_| !self.is_owner_bound(b.index, session));
        let (h, name) = (session.store_key(), &*b.spec.name);
        if let Some(store) = store {
            let held = match on {
                true => store.subscriptions().hold(h, name, uri).await,
                false => store
                    .subscriptions()
                    .remove(h, name, uri)
                    .await
                    .map(|_| Held::Here),
            };
            match held {
                Ok(Held::Other(tag)) => {
                    tracing::debug!(session = %session.log_id(), backend = name, replica = %tag,
                        "subscription held by another replica: not made again here");
                    session.note_subscription(name, uri, true);
                    self.watch_holder(session, tag);
                    return Ok(None);
                }
                Ok(_) => {}
                Err(_) => tracing::debug!(session = %session.log_id(), backend = name,
                    "subscription kept on this replica only: the shared store did not answer"),
            }
        }
        let outcome = self.subscribe_here(session, b, uri, on).await;
        if let (true, Err(_), Some(store)) = (on, &outcome, store) {
            let _ = store.subscriptions().remove(h, name, uri).await;
        }
        // For the next owner of a per-session child (forgotten here either way).
        if outcome.is_ok() || !on {
            self.record_subscription(session, b, uri, on).await;
        }
        outcome
    }

    /// Subscribes (`on`) or unsubscribes `session` here: the relay's
    /// refcount, and upstream on the connection that serves the session when
    /// needed (the first or last subscriber on a shared connection, always on
    /// the session's own). A failed subscribe is undone here.
    async fn subscribe_here(
        &self,
        session: &Arc<Session>,
        b: &BackendState,
        uri: &str,
        on: bool,
    ) -> Result<Option<RawJson>, BackendError> {
        let subs = self.relay.subscriptions();
        let shared = b.shares_with(session.created());
        let needed = match on {
            true => subs.subscribe(b, uri, session) || !shared,
            false => subs.unsubscribe(b, uri, session) || !shared,
        };
        if !needed {
            return Ok(None);
        }
        let method = match on {
            true => Method::ResourcesSubscribe,
            false => Method::ResourcesUnsubscribe,
        };
        let outcome = match self
            .connection_for(b.index, &Host::Legacy(session.clone()))
            .await
        {
            Ok(conn) => {
                let params = json!({ "uri": uri });
                (conn
                    .request(&method, Some(params), None, conn.timeout())
                    .await)
                    .map(Some)
            }
            Err(e) => Err(e),
        };
        if on && outcome.is_err() {
            subs.unsubscribe(b, uri, session);
        }
        outcome
    }

    /// The host of `session` unsubscribed on another replica from `uri` of
    /// backend `backend`, held here: this replica's share ends.
    pub(super) fn unsubscribe_forwarded(&self, session: &Session, backend: &str, uri: &str) {
        if self.end_share(session, backend, uri) {
            tracing::info!(session = %session.log_id(), backend,
                "subscription ended here: the host unsubscribed on another replica");
        }
    }

    /// After a fence: each subscription held here that another replica took
    /// meanwhile (this one's heartbeat key had expired) ends here, so that
    /// only its new holder is subscribed (one `EVAL` each).
    pub(super) async fn recheck_holds(self: &Arc<Self>) {
        let Some(store) = &self.shared else {
            return;
        };
        for (idx, uri, sid) in self.relay.subscriptions().entries() {
            let Some(session) = self.sessions.get(&sid) else {
                continue;
            };
            let b = self.catalog.backend(idx);
            if b.is_removed() || self.is_owner_bound(idx, &session) {
                continue;
            }
            let h = session.store_key();
            if let Ok(Held::Other(tag)) = store.subscriptions().hold(h, &b.spec.name, &uri).await {
                tracing::info!(session = %session.log_id(), backend = %b.spec.name, replica = %tag,
                    "subscription taken by another replica while this one was fenced: ended here");
                self.end_share(&session, &b.spec.name, &uri);
                session.note_subscription(&b.spec.name, &uri, true);
                self.watch_holder(&session, tag);
            }
        }
    }

    /// Ends `session`'s share of its subscription to `uri` of backend
    /// `backend` here: upstream on a shared connection with its last
    /// subscriber (a session's own connection is left to the replica that
    /// holds or ended the subscription). Whether it had one here.
    fn end_share(&self, session: &Session, backend: &str, uri: &str) -> bool {
        let Some(b) = self.catalog.backends().by_name(backend) else {
            return false;
        };
        let subs = self.relay.subscriptions();
        if !subs.contains(b.index, uri, session.id()) {
            return false;
        }
        if subs.unsubscribe(&b, uri, session)
            && let Some(conn) = b.shared().current()
        {
            let params = json!({ "uri": uri });
            tokio::spawn(async move {
                let timeout = conn.timeout();
                let unsubscribe = Method::ResourcesUnsubscribe;
                let _ = conn
                    .request(&unsubscribe, Some(params), None, timeout)
                    .await;
            });
        }
        true
    }

    /// Takes over `session`'s subscriptions that are vacant or whose holder
    /// is dead (one `EVAL`) and subscribes each here; watches the live
    /// holders of the others. A failure is logged.
    pub async fn take_over_subscriptions(self: &Arc<Self>, session: &Arc<Session>) {
        let Some(store) = &self.shared else {
            return;
        };
        let Ok(adopted) = store.subscriptions().adopt(session.store_key()).await else {
            return;
        };
        for tag in adopted.others {
            self.watch_holder(session, tag);
        }
        for (name, uri) in adopted.taken {
            let Some(b) = self.catalog.backends().by_name(&name) else {
                continue;
            };
            if b.is_removed() || self.is_owner_bound(b.index, session) {
                continue;
            }
            match self.subscribe_here(session, &b, &uri, true).await {
                Ok(_) => tracing::info!(session = %session.log_id(), backend = %name,
                    "subscription taken over: its holder is gone"),
                Err(e) => tracing::warn!(session = %session.log_id(), backend = %name, cause = %e,
                    "subscription taken over but not made here: the backend refused it"),
            }
        }
    }

    /// [`Supervisor::take_over_subscriptions`] on a task of its own.
    pub fn spawn_take_over(self: &Arc<Self>, session: &Arc<Session>) {
        if self.shared.is_none() {
            return;
        }
        let (me, s) = (self.clone(), session.clone());
        tokio::spawn(async move { me.take_over_subscriptions(&s).await });
    }

    /// This replica lets `session` go while it lives on elsewhere: the
    /// subscriptions it held become vacant (one `EVAL`, only when it held
    /// any), so another replica takes them.
    pub(super) async fn vacate_subscriptions(&self, session: &Session, held_any: bool) {
        if let (true, Some(store)) = (held_any, &self.shared) {
            let _ = store.subscriptions().vacate(session.store_key()).await;
        }
    }

    /// Watches replica `tag`, which holds a subscription of `session`: if it
    /// dies, this replica takes the session's subscriptions over.
    pub(super) fn watch_holder(self: &Arc<Self>, session: &Arc<Session>, tag: String) {
        let Some(store) = self.shared.clone().filter(|s| s.tag() != tag) else {
            return;
        };
        {
            let mut watched = self.holders.lock();
            let list = watched.entry(tag).or_default();
            if !list.iter().any(|w| w.as_ptr() == Arc::as_ptr(session)) {
                list.push(Arc::downgrade(session));
            }
        }
        if !self.holders.checking.swap(true, Ordering::AcqRel) {
            tokio::spawn(check_holders(Arc::downgrade(self), store));
        }
    }
}

/// Every heartbeat while any holder is watched: the sessions whose watched
/// holder died are taken over here.
async fn check_holders(sup: Weak<Supervisor>, store: Arc<SharedStore>) {
    let mut tick = tokio::time::interval(store.heartbeat());
    loop {
        tick.tick().await;
        let Some(sup) = sup.upgrade() else { return };
        let tags: Vec<String> = {
            let mut watched = sup.holders.lock();
            watched.retain(|_, list| {
                list.retain(|w| w.upgrade().is_some_and(|s| !s.is_ended()));
                !list.is_empty()
            });
            if watched.is_empty() {
                sup.holders.checking.store(false, Ordering::Release);
                return;
            }
            watched.keys().cloned().collect()
        };
        let Some(alive) = store.alive_tags(&tags).await else {
            continue;
        };
        for (tag, alive) in tags.into_iter().zip(alive) {
            let orphans = match alive {
                true => continue,
                false => sup.holders.lock().remove(&tag).unwrap_or_default(),
            };
            for s in orphans.iter().filter_map(Weak::upgrade) {
                tracing::info!(session = %s.log_id(), replica = %tag,
                    "a replica holding subscriptions of a session here is gone");
                sup.spawn_take_over(&s);
            }
        }
    }
}
