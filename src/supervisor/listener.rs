//! One GET listener per shared backend session (`[cluster] redis`, issue 11
//! item 4): of the replicas holding a connection to a per-session HTTP
//! backend's shared backend session, one opens the standalone GET stream on
//! it (the official SDK servers refuse a second one with 409 Conflict); the
//! others stand by. The claim is the record's `gl:NAME`
//! (`cluster/listener.rs`), asked when a connection would open its stream.
//!
//! - Standbys are re-checked off the request path, every heartbeat while
//!   there are any: one pipelined `EXISTS` of the distinct holders'
//!   heartbeat keys; a dead holder's standby here claims (one `EVAL`) and
//!   listens. A standby's first tick also claims once more (the holder may
//!   have let go just before it registered).
//! - A holder that lets go (its connection closed: idle, the session ended
//!   here, a drain) releases the field and broadcasts it; a standby here
//!   claims at once (`Ctl::Listener`).
//!
//! Costs: nothing per call; one `EVAL` per connection opened, one per close
//! of a holding connection, one pipeline per heartbeat while standbys wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures_util::future::BoxFuture;
use prometheus::IntCounterVec;

use crate::backend::{Connection, ListenGate};
use crate::cluster::{ListenClaim, SharedStore};

/// A session's store key and a backend name.
type Key = (String, Arc<str>);

/// A connection standing by, and who listens meanwhile.
struct Standby {
    holder: String,
    conn: Weak<Connection>,
    gate: Arc<StoreGate>,
    /// Registered since the last check: claimed once more at the next.
    fresh: bool,
}

/// The connections of this replica standing by; see the module docs.
#[derive(Default)]
pub(super) struct Standbys {
    waiting: Mutex<HashMap<Key, Standby>>,
    /// Whether the check task runs (it ends when nobody waits).
    checking: AtomicBool,
}

impl Standbys {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Standby>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(self: &Arc<Self>, gate: &Arc<StoreGate>, holder: String, conn: &Arc<Connection>) {
        let standby = Standby {
            holder,
            conn: Arc::downgrade(conn),
            gate: gate.clone(),
            fresh: true,
        };
        self.lock().insert(gate.key(), standby);
        if !self.checking.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().check(gate.store.clone()));
        }
    }

    /// Forgets `gate`'s standby (not a newer connection's).
    fn remove(&self, gate: &Arc<StoreGate>) {
        let mut waiting = self.lock();
        if let Some(s) = waiting.get(&gate.key())
            && Arc::ptr_eq(&s.gate, gate)
        {
            waiting.remove(&gate.key());
        }
    }

    /// Another replica let go of the GET stream of session `h`'s backend
    /// session on `backend`: the standby here, if any, claims it.
    pub(super) fn freed(&self, h: &str, backend: &str) {
        let key = (h.to_owned(), Arc::from(backend));
        if let Some(s) = self.lock().remove(&key) {
            tokio::spawn(take_over(s, Some("released")));
        }
    }

    /// Every heartbeat while anyone waits: standbys of dead holders (and
    /// fresh ones) claim.
    async fn check(self: Arc<Self>, store: Arc<SharedStore>) {
        let mut tick = tokio::time::interval(store.heartbeat());
        loop {
            tick.tick().await;
            let tags: Vec<String> = {
                let mut waiting = self.lock();
                waiting.retain(|_, s| s.conn.upgrade().is_some_and(|c| c.is_alive()));
                if waiting.is_empty() {
                    self.checking.store(false, Ordering::Release);
                    return;
                }
                let mut tags: Vec<String> = waiting.values().map(|s| s.holder.clone()).collect();
                tags.sort_unstable();
                tags.dedup();
                tags
            };
            let Some(alive) = store.alive_tags(&tags).await else {
                continue;
            };
            let dead: Vec<&String> = (tags.iter().zip(alive))
                .filter_map(|(t, alive)| (!alive).then_some(t))
                .collect();
            let due: Vec<Key> = {
                let waiting = self.lock();
                (waiting.iter())
                    .filter(|(_, s)| s.fresh || dead.contains(&&s.holder))
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            for k in due {
                let Some(s) = self.lock().remove(&k) else {
                    continue;
                };
                let reason = dead.contains(&&s.holder).then_some("holder_lost");
                tokio::spawn(take_over(s, reason));
            }
        }
    }
}

/// A standby claims (`reason`: the takeover to count if it wins); listens
/// if it won.
async fn take_over(s: Standby, reason: Option<&'static str>) {
    let Some(conn) = s.conn.upgrade().filter(|c| c.is_alive()) else {
        return;
    };
    if s.gate.try_claim(&conn, reason).await {
        tracing::info!(backend = %conn.backend, reason, "took over the backend's GET stream for a session");
        conn.listen_now();
    }
}

/// The gate of one session's connection to one backend, in the shared store.
pub(super) struct StoreGate {
    pub(super) store: Arc<SharedStore>,
    /// The session's store key.
    pub(super) h: String,
    pub(super) backend: Arc<str>,
    pub(super) standbys: Arc<Standbys>,
    /// `mcpgate_cluster_listener_takeovers_total`.
    pub(super) takeovers: IntCounterVec,
    /// Whether this connection holds the claim (released when it closes).
    pub(super) held: AtomicBool,
    /// This connection's number in the claim ([`next_conn`]).
    pub(super) conn: u64,
}

/// A number for a new connection's claim, unique in this process.
pub(super) fn next_conn() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl StoreGate {
    fn key(&self) -> Key {
        (self.h.clone(), self.backend.clone())
    }

    /// Claims the GET stream for `conn`; whether it may listen now. Lost to
    /// a live holder: stands by. `reason`: a takeover to count if it wins.
    async fn try_claim(self: &Arc<Self>, conn: &Arc<Connection>, reason: Option<&str>) -> bool {
        let won = match self
            .store
            .listener()
            .claim(&self.h, &self.backend, self.conn)
            .await
        {
            Ok(ListenClaim::Mine) => reason,
            Ok(ListenClaim::Adopted(from)) => {
                tracing::info!(backend = %self.backend, replica = %from, "the replica listening on the backend session is gone");
                Some("holder_lost")
            }
            Ok(ListenClaim::Other(holder)) => {
                self.standbys.add(self, holder, conn);
                return false;
            }
            // The session ended: nothing to hear.
            Ok(ListenClaim::NoRecord) => return false,
            // Nobody can tell: as without a store (the backend may refuse).
            Err(_) => return true,
        };
        if let Some(reason) = won {
            self.takeovers.with_label_values(&[reason]).inc();
        }
        self.held.store(true, Ordering::Release);
        true
    }
}

impl ListenGate for StoreGate {
    fn claim(self: Arc<Self>, conn: &Arc<Connection>) -> BoxFuture<'static, bool> {
        let conn = conn.clone();
        Box::pin(async move { self.try_claim(&conn, None).await })
    }

    fn release(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.standbys.remove(&self);
            if self.held.swap(false, Ordering::AcqRel) {
                let _ = self
                    .store
                    .listener()
                    .release(&self.h, &self.backend, self.conn)
                    .await;
            }
        })
    }
}
