//! The session store: a trait (so a shared store can replace it for several
//! replicas) and the default in-memory implementation with a cap, idle expiry,
//! the absolute lifetime, and the memory of which sealed ids ended here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::time::Instant;

use super::Session;
use super::token::{Identity, unix_now};
use crate::cluster::random_bytes;

/// `initialize` was refused because the store holds `max_sessions` sessions.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("too many sessions (limit {limit})")]
pub struct StoreFull {
    /// The configured cap.
    pub limit: usize,
}

/// Where host sessions live: in memory, and with `[cluster] redis` in front of
/// the shared store as its near-cache.
pub trait SessionStore: Send + Sync + 'static {
    /// Adds a session. Errors with [`StoreFull`] at the cap.
    fn insert(&self, session: Arc<Session>) -> Result<(), StoreFull>;
    /// Looks a session up by `Mcp-Session-Id`.
    fn get(&self, id: &str) -> Option<Arc<Session>>;
    /// Removes a session.
    fn remove(&self, id: &str) -> Option<Arc<Session>>;
    /// Number of sessions.
    fn len(&self) -> usize;
    /// Every session (for notifications that concern all of them).
    fn all(&self) -> Vec<Arc<Session>>;
    /// Removes and returns sessions idle for longer than `ttl` at `now` (sessions
    /// with requests in flight are never idle), and those past the absolute
    /// lifetime.
    fn take_expired(&self, now: Instant, ttl: Duration) -> Vec<Arc<Session>>;
    /// The epoch sealed into the ids minted now ([`Identity::epoch`]).
    fn epoch(&self) -> u32;
    /// Takes back a session rebuilt from its sealed id (not held here, e.g.
    /// after a restart): the session now held under its id (another request may
    /// have restored it first), or `Ok(None)` when the id must not come back —
    /// it ended here (DELETE, expiry) or is past the absolute lifetime.
    fn restore(&self, session: Arc<Session>) -> Result<Option<Arc<Session>>, StoreFull>;
    /// Takes back a session whose record the shared store still holds: only
    /// the cap and the absolute lifetime apply — the shared store, not this
    /// process's memory of what ended here, knows whether it ended (an idle
    /// expiry here only dropped the cached copy). `Ok(None)`: past its lifetime.
    fn adopt(&self, session: Arc<Session>) -> Result<Option<Arc<Session>>, StoreFull>;
    /// Sets the cap (`server.max_sessions`, at a reload). Sessions held beyond a
    /// lowered cap stay; new ones are refused until the count is below it.
    fn set_limit(&self, limit: usize);
}

/// In-memory store (dashmap), the default.
///
/// Which ids may come back from their token alone: one minted by this store
/// (its epoch) and no longer held has ended, so never. One minted elsewhere (an
/// earlier process with the same keys) may, once: when it ends here its identity
/// is remembered until its absolute lifetime is over (at most `2 × limit`
/// entries; beyond, the ones closest to their end are forgotten first). What
/// this cannot know: an id that ended in *another* process — DELETEd before a
/// restart — comes back until its lifetime is over; only a shared store knows.
pub struct MemoryStore {
    map: DashMap<Arc<str>, Arc<Session>, foldhash::fast::RandomState>,
    /// `server.max_sessions` (a reload may change it).
    limit: AtomicUsize,
    max_lifetime: Duration,
    epoch: u32,
    /// Identities minted elsewhere that ended here → Unix second they expire.
    /// Also the lock that orders `restore` against `remove`.
    ended: Mutex<HashMap<[u8; 16], u32>>,
}

impl MemoryStore {
    /// A store that holds at most `limit` sessions, each for at most
    /// `max_lifetime` after its `initialize`; its epoch is random.
    pub fn new(limit: usize, max_lifetime: Duration) -> Self {
        MemoryStore {
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            limit: AtomicUsize::new(limit),
            max_lifetime,
            epoch: u32::from_be_bytes(random_bytes()),
            ended: Mutex::default(),
        }
    }

    fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    fn outlived(&self, id: &Identity, now: u32) -> bool {
        id.outlived(now, self.max_lifetime)
    }

    fn remember_end(&self, ended: &mut HashMap<[u8; 16], u32>, id: &Identity) {
        let now = unix_now();
        if id.epoch == self.epoch || self.outlived(id, now) {
            return;
        }
        let cap = self.limit().saturating_mul(2).max(1);
        if ended.len() >= cap {
            ended.retain(|_, until| *until > now);
        }
        if ended.len() >= cap
            && let Some(first) = ended.iter().min_by_key(|(_, u)| **u).map(|(k, _)| *k)
        {
            ended.remove(&first);
        }
        let lifetime = u32::try_from(self.max_lifetime.as_secs()).unwrap_or(u32::MAX);
        ended.insert(id.rand, id.created.saturating_add(lifetime));
    }

    /// `restore` (`ended_here`: refuse what ended in this process) and `adopt`.
    fn take_back(
        &self,
        session: Arc<Session>,
        ended_here: bool,
    ) -> Result<Option<Arc<Session>>, StoreFull> {
        let id = *session.identity();
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = self.get(&session.id) {
            return Ok(Some(held));
        }
        let refused = ended_here && (id.epoch == self.epoch || ended.contains_key(&id.rand));
        if refused || self.outlived(&id, unix_now()) {
            return Ok(None);
        }
        let limit = self.limit();
        if self.map.len() >= limit {
            return Err(StoreFull { limit });
        }
        Ok(Some(match self.map.entry(session.id.clone()) {
            Entry::Occupied(e) => e.get().clone(),
            Entry::Vacant(e) => e.insert(session).clone(),
        }))
    }
}

impl SessionStore for MemoryStore {
    fn insert(&self, session: Arc<Session>) -> Result<(), StoreFull> {
        let limit = self.limit();
        if self.map.len() >= limit {
            return Err(StoreFull { limit });
        }
        self.map.insert(session.id.clone(), session);
        Ok(())
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.map.get(id).map(|s| s.clone())
    }

    fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        let gone = self.map.remove(id).map(|(_, s)| s)?;
        self.remember_end(&mut ended, gone.identity());
        Some(gone)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn all(&self) -> Vec<Arc<Session>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    fn take_expired(&self, now: Instant, ttl: Duration) -> Vec<Arc<Session>> {
        let unix = unix_now();
        let expired: Vec<Arc<str>> = self
            .map
            .iter()
            .filter(|e| {
                let s = e.value();
                let idle = !s.is_busy() && now.saturating_duration_since(s.last_seen()) > ttl;
                idle || self.outlived(s.identity(), unix)
            })
            .map(|e| e.key().clone())
            .collect();
        let gone: Vec<Arc<Session>> = expired.iter().filter_map(|id| self.remove(id)).collect();
        if gone.len() >= 64 {
            // After a mass expiry, give the table's memory back (a map never
            // shrinks by itself, and a gateway that held a burst of sessions would
            // keep their memory for good).
            self.map.shrink_to_fit();
        }
        gone
    }

    fn epoch(&self) -> u32 {
        self.epoch
    }

    fn restore(&self, session: Arc<Session>) -> Result<Option<Arc<Session>>, StoreFull> {
        self.take_back(session, true)
    }

    fn adopt(&self, session: Arc<Session>) -> Result<Option<Arc<Session>>, StoreFull> {
        self.take_back(session, false)
    }

    fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::ProtocolVersion;

    const DAY: Duration = Duration::from_secs(86_400);

    fn session_of(identity: Identity) -> Arc<Session> {
        let id: Arc<str> = format!("id-{:02x?}", identity.rand).into();
        Arc::new(Session::new(
            id,
            identity,
            ProtocolVersion::LATEST,
            json!({}),
            json!({}),
        ))
    }

    /// A session minted by `store`.
    fn session(store: &MemoryStore) -> Arc<Session> {
        session_of(Identity::mint(store.epoch()))
    }

    /// A session minted by another process (an earlier one, same keys).
    fn foreign(store: &MemoryStore, created: u32) -> Arc<Session> {
        session_of(Identity {
            created,
            ..Identity::mint(store.epoch().wrapping_add(1))
        })
    }

    #[tokio::test(start_paused = true)]
    async fn expires_idle_sessions_only() {
        let store = MemoryStore::new(10, DAY);
        let a = session(&store);
        let b = session(&store);
        store.insert(a.clone()).unwrap();
        store.insert(b.clone()).unwrap();
        tokio::time::advance(Duration::from_secs(50)).await;
        b.touch();
        tokio::time::advance(Duration::from_secs(20)).await;
        let gone = store.take_expired(Instant::now(), Duration::from_secs(60));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].id, a.id);
        assert!(store.get(&b.id).is_some());
        assert!(store.get(&a.id).is_none());
    }

    #[test]
    fn ends_sessions_past_the_absolute_lifetime() {
        let store = MemoryStore::new(10, DAY);
        let old = foreign(&store, unix_now() - 86_400);
        let young = foreign(&store, unix_now() - 60);
        store.insert(old.clone()).unwrap();
        store.insert(young.clone()).unwrap();
        let gone = store.take_expired(Instant::now(), DAY);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].id, old.id);
        assert!(store.restore(old).unwrap().is_none(), "past its lifetime");
    }

    #[test]
    fn caps_the_number_of_sessions() {
        let store = MemoryStore::new(1, DAY);
        store.insert(session(&store)).unwrap();
        assert!(store.insert(session(&store)).is_err());
        assert!(store.restore(foreign(&store, unix_now())).is_err());
    }

    #[test]
    fn restores_foreign_ids_once_and_never_its_own() {
        let store = MemoryStore::new(10, DAY);
        let own = session(&store);
        assert!(store.restore(own.clone()).unwrap().is_none(), "ended here");

        let a = foreign(&store, unix_now());
        let held = store.restore(a.clone()).unwrap().unwrap();
        assert!(Arc::ptr_eq(&held, &a));
        let twin = session_of(*a.identity());
        let again = store.restore(twin).unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&again, &a),
            "a concurrent restore gets the held one"
        );

        store.remove(&a.id);
        let twin = session_of(*a.identity());
        assert!(
            store.restore(twin).unwrap().is_none(),
            "DELETEd here: stays ended"
        );
    }

    #[test]
    fn adopts_what_the_shared_store_confirms() {
        let store = MemoryStore::new(1, DAY);
        let own = session(&store);
        let held = store.adopt(own.clone()).unwrap().unwrap();
        assert!(Arc::ptr_eq(&held, &own), "its own epoch: expired here only");
        store.remove(&own.id);
        assert!(store.adopt(session_of(*own.identity())).unwrap().is_some());
        assert!(store.adopt(foreign(&store, unix_now())).is_err(), "the cap");
        store.remove(&own.id);
        let old = foreign(&store, unix_now() - 86_400);
        assert!(store.adopt(old).unwrap().is_none(), "past its lifetime");
    }

    #[test]
    fn the_memory_of_ended_ids_is_bounded() {
        let store = MemoryStore::new(2, DAY);
        let now = unix_now();
        let ended: Vec<Arc<Session>> = (0..6).map(|i| foreign(&store, now - 100 + i)).collect();
        for s in &ended {
            store.restore(s.clone()).unwrap().unwrap();
            store.remove(&s.id);
        }
        let len = store.ended.lock().unwrap().len();
        assert_eq!(len, 4, "2 x limit");
        // The oldest were forgotten first; the newest are still refused.
        assert!(
            store
                .restore(session_of(*ended[5].identity()))
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .restore(session_of(*ended[0].identity()))
                .unwrap()
                .is_some()
        );
    }
}
