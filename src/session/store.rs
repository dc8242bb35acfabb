//! The session store: a trait (so a shared store can replace it for several
//! replicas) and the default in-memory implementation with a cap, idle expiry,
//! the absolute lifetime, and the memory of which sealed ids ended here.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::time::Instant;

use super::Session;
use super::token::{Identity, unix_now};
use crate::auth::ClientKey;
use crate::cluster::random_bytes;

/// `initialize` was refused because the store holds `max_sessions` sessions,
/// or the client's `max_sessions_per_client`.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("too many sessions (limit {limit})")]
pub struct StoreFull {
    /// The configured cap.
    pub limit: usize,
    /// Whether it is the client's share (`max_sessions_per_client`) rather
    /// than the store's cap.
    pub per_client: bool,
}

/// The client a session is counted against: its principal, or its address.
fn client_of(session: &Session) -> Option<ClientKey> {
    ClientKey::of(session.principal(), session.client())
}

/// Where host sessions live: in memory, and with `[cluster] redis` in front of
/// the shared store as its near-cache.
pub trait SessionStore: Send + Sync + 'static {
    /// Adds a session a host just initialized. Errors with [`StoreFull`] at
    /// the cap or at its client's share.
    fn insert(&self, session: Arc<Session>) -> Result<(), StoreFull>;
    /// Removes and returns the oldest session that was never used (no
    /// request after `initialize`, [`Session::is_fresh`]) and was created at
    /// least `older_than` ago: `client`'s (its principal, or address), or any
    /// client's for `None`, claimed first ([`Session::claim_unused`]: a
    /// request that looked it up meanwhile gets 404). `None` when there is no
    /// such session.
    fn evict_unused(
        &self,
        client: Option<&ClientKey>,
        older_than: Duration,
    ) -> Option<Arc<Session>>;
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
    /// Sets the cap (`server.max_sessions`) and each client's share
    /// (`max_sessions_per_client`), at a reload. Sessions held beyond a
    /// lowered cap stay; new ones are refused until the count is below it.
    fn set_limits(&self, limit: usize, per_client: usize);
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
    /// `server.max_sessions_per_client` (a reload may change it).
    per_client: AtomicUsize,
    /// Sessions held by client (principal or address); also the lock that
    /// orders inserts, so neither limit is overshot.
    by_client: Mutex<HashMap<ClientKey, usize>>,
    /// Sessions inserted (initialized here), oldest first: where the oldest
    /// never-used one is looked for. Entries of sessions since used or gone
    /// are dropped lazily (at the front, and when it outgrows the cap).
    fresh: Mutex<VecDeque<Weak<Session>>>,
    max_lifetime: Duration,
    epoch: u32,
    /// Identities minted elsewhere that ended here → Unix second they expire.
    /// Also the lock that orders `restore` against `remove`.
    ended: Mutex<HashMap<[u8; 16], u32>>,
}

impl MemoryStore {
    /// A store that holds at most `limit` sessions (any number of them of one
    /// client until [`SessionStore::set_limits`]), each for at most
    /// `max_lifetime` after its `initialize`; its epoch is random.
    pub fn new(limit: usize, max_lifetime: Duration) -> Self {
        MemoryStore {
            map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            limit: AtomicUsize::new(limit),
            per_client: AtomicUsize::new(usize::MAX),
            by_client: Mutex::default(),
            fresh: Mutex::default(),
            max_lifetime,
            epoch: u32::from_be_bytes(random_bytes()),
            ended: Mutex::default(),
        }
    }

    fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, usize>> {
        self.by_client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `session` (the caller holds the count lock and checked the cap).
    fn hold(&self, counts: &mut HashMap<ClientKey, usize>, session: Arc<Session>) -> Arc<Session> {
        match self.map.entry(session.id.clone()) {
            Entry::Occupied(e) => e.get().clone(),
            Entry::Vacant(e) => {
                if let Some(c) = client_of(&session) {
                    *counts.entry(c).or_default() += 1;
                }
                e.insert(session).clone()
            }
        }
    }

    /// Whether `s` is held here (not ended), was never used and is not
    /// claimed for eviction.
    fn unused(&self, s: &Arc<Session>) -> bool {
        s.is_fresh() && !s.is_ended() && self.map.get(&s.id).is_some_and(|h| Arc::ptr_eq(&h, s))
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
        // A session taken back is in use: only the store's cap applies, not
        // the client's share (it is counted in it, though).
        let mut counts = self.counts();
        if self.map.len() >= limit {
            return Err(StoreFull {
                limit,
                per_client: false,
            });
        }
        Ok(Some(self.hold(&mut counts, session)))
    }
}

impl SessionStore for MemoryStore {
    fn insert(&self, session: Arc<Session>) -> Result<(), StoreFull> {
        let mut counts = self.counts();
        let per_client = self.per_client.load(Ordering::Relaxed);
        let limit = self.limit();
        // A share as large as the cap is the cap.
        if per_client < limit
            && let Some(c) = client_of(&session)
            && counts.get(&c).is_some_and(|n| *n >= per_client)
        {
            return Err(StoreFull {
                limit: per_client,
                per_client: true,
            });
        }
        if self.map.len() >= limit {
            return Err(StoreFull {
                limit,
                per_client: false,
            });
        }
        let weak = Arc::downgrade(&session);
        self.hold(&mut counts, session);
        drop(counts);
        let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        fresh.push_back(weak);
        if fresh.len() > limit.saturating_mul(2).saturating_add(64) {
            fresh.retain(|w| w.upgrade().is_some_and(|s| self.unused(&s)));
        }
        Ok(())
    }

    fn evict_unused(
        &self,
        client: Option<&ClientKey>,
        older_than: Duration,
    ) -> Option<Arc<Session>> {
        let now = Instant::now();
        let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(front) = fresh.front() {
            match front.upgrade() {
                Some(s) if self.unused(&s) => break,
                _ => {
                    fresh.pop_front();
                }
            }
        }
        // Oldest first: the first one too young ends the search.
        let mut found = None;
        for (i, w) in fresh.iter().enumerate() {
            let Some(s) = w.upgrade() else { continue };
            if now.saturating_duration_since(s.created()) < older_than {
                break;
            }
            // Claimed under the `fresh` lock, exclusively with `mark_used`.
            let theirs = client.is_none() || client_of(&s).as_ref() == client;
            if theirs && self.unused(&s) && s.claim_unused() {
                found = Some((i, s));
                break;
            }
        }
        let (i, s) = found?;
        fresh.remove(i);
        drop(fresh);
        self.remove(&s.id)
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.map.get(id).map(|s| s.clone())
    }

    fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = self.counts();
        let gone = self.map.remove(id).map(|(_, s)| s)?;
        if let Some(c) = client_of(&gone)
            && let Some(n) = counts.get_mut(&c)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&c);
            }
        }
        drop(counts);
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

    fn set_limits(&self, limit: usize, per_client: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.per_client.store(per_client, Ordering::Relaxed);
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

    fn at(session: Session, last: u8) -> Arc<Session> {
        let ip = std::net::IpAddr::from([192, 0, 2, last]);
        Arc::new(session.opened_by(Some(ip)))
    }

    fn fresh(store: &MemoryStore, last: u8) -> Arc<Session> {
        let identity = Identity::mint(store.epoch());
        let id: Arc<str> = format!("id-{:02x?}", identity.rand).into();
        let s = Session::new(id, identity, ProtocolVersion::LATEST, json!({}), json!({}));
        at(s, last)
    }

    #[tokio::test(start_paused = true)]
    async fn a_clients_share_and_the_oldest_never_used_session() {
        const GRACE: Duration = Duration::from_secs(5);
        let store = MemoryStore::new(4, DAY);
        store.set_limits(4, 2);
        let (oldest, used) = (fresh(&store, 1), fresh(&store, 1));
        store.insert(oldest.clone()).unwrap();
        store.insert(used.clone()).unwrap();
        used.mark_used();
        let full = store.insert(fresh(&store, 1)).unwrap_err();
        assert!(full.per_client && full.limit == 2);
        assert!(
            store.evict_unused(None, GRACE).is_none(),
            "nothing old enough"
        );
        store.insert(fresh(&store, 2)).unwrap();
        tokio::time::advance(GRACE).await;
        let other = fresh(&store, 2);
        store.insert(other.clone()).unwrap();
        let full = store.insert(fresh(&store, 3)).unwrap_err();
        assert!(!full.per_client && full.limit == 4, "the cap");
        let gone = store.evict_unused(None, GRACE).expect("the oldest");
        assert!(Arc::ptr_eq(&gone, &oldest));
        assert!(store.get(&oldest.id).is_none());
        // Client 1 holds one session now: room for one more of its own.
        store.insert(fresh(&store, 1)).unwrap();
        let client2 = ClientKey::Address(std::net::IpAddr::from([192, 0, 2, 2]));
        let gone = store.evict_unused(Some(&client2), GRACE).expect("2's");
        assert!(!Arc::ptr_eq(&gone, &other), "the older of client 2's");
        assert!(
            store.evict_unused(Some(&client2), GRACE).is_none(),
            "its other one is too young"
        );
        assert!(store.get(&used.id).is_some(), "a used session stays");
    }

    #[tokio::test(start_paused = true)]
    async fn eviction_and_first_use_exclude_each_other() {
        let store = MemoryStore::new(4, DAY);
        let (first, second) = (fresh(&store, 1), fresh(&store, 1));
        store.insert(first.clone()).unwrap();
        store.insert(second.clone()).unwrap();
        // A request looked `first` up just before an eviction took it: its
        // first use comes too late and is refused (the host gets 404).
        let looked_up = store.get(&first.id).expect("held");
        let gone = store
            .evict_unused(None, Duration::ZERO)
            .expect("the oldest");
        assert!(Arc::ptr_eq(&gone, &first));
        assert!(
            !looked_up.mark_used(),
            "a session being evicted is not used"
        );
        // Used first: no eviction claims it, and it stays used.
        assert!(second.mark_used() && second.mark_used());
        assert!(!second.claim_unused());
        assert!(store.evict_unused(None, Duration::ZERO).is_none());
        assert!(store.get(&second.id).is_some());
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
