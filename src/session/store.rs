//! The session store: a trait (so a shared store can replace it for several
//! replicas) and the default in-memory implementation with a cap and idle expiry.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use super::Session;

/// `initialize` was refused because the store holds `max_sessions` sessions.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("too many sessions (limit {limit})")]
pub struct StoreFull {
    /// The configured cap.
    pub limit: usize,
}

/// Where host sessions live (DESIGN decision 6).
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
    /// with requests in flight are never idle).
    fn take_expired(&self, now: Instant, ttl: Duration) -> Vec<Arc<Session>>;
}

/// In-memory store (dashmap), the default.
pub struct MemoryStore {
    map: DashMap<Arc<str>, Arc<Session>>,
    limit: usize,
}

impl MemoryStore {
    /// A store that holds at most `limit` sessions.
    pub fn new(limit: usize) -> Self {
        MemoryStore {
            map: DashMap::new(),
            limit,
        }
    }
}

impl SessionStore for MemoryStore {
    fn insert(&self, session: Arc<Session>) -> Result<(), StoreFull> {
        if self.map.len() >= self.limit {
            return Err(StoreFull { limit: self.limit });
        }
        self.map.insert(session.id.clone(), session);
        Ok(())
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.map.get(id).map(|s| s.clone())
    }

    fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.map.remove(id).map(|(_, s)| s)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn all(&self) -> Vec<Arc<Session>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }

    fn take_expired(&self, now: Instant, ttl: Duration) -> Vec<Arc<Session>> {
        let expired: Vec<Arc<str>> = self
            .map
            .iter()
            .filter(|e| {
                let s = e.value();
                !s.is_busy() && now.saturating_duration_since(s.last_seen()) > ttl
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::ProtocolVersion;

    fn session() -> Arc<Session> {
        Arc::new(Session::new(ProtocolVersion::LATEST, json!({}), json!({})))
    }

    #[tokio::test(start_paused = true)]
    async fn expires_idle_sessions_only() {
        let store = MemoryStore::new(10);
        let a = session();
        let b = session();
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
    fn caps_the_number_of_sessions() {
        let store = MemoryStore::new(1);
        store.insert(session()).unwrap();
        assert!(store.insert(session()).is_err());
    }

    #[test]
    fn ids_are_random_visible_ascii() {
        let a = crate::streamable_http::new_session_id();
        let b = crate::streamable_http::new_session_id();
        assert_ne!(a, b);
        assert!(a.len() >= 22);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
    }
}
