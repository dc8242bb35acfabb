//! A `list_changed` from a connection that serves one session (a backend in
//! `per_session` mode): that connection's lists are that session's, which the
//! backend's catalogue connection may not have (`catalog/own.rs`). With a
//! shared store the session's record says so (`ol`, the owner's mark), before
//! the session is told, so that every replica lists what this one does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Connection;
use crate::catalog::{Catalog, fetch};
use crate::cluster::SharedStore;
use crate::jsonrpc;
use crate::session::{Session, SessionStore};

/// The spacing between fetches once two in a row changed nothing; it doubles
/// with each further one, up to [`SLOWEST`].
const QUIET: Duration = Duration::from_secs(1);
/// The longest spacing between fetches of a connection that keeps announcing
/// changes that change nothing.
const SLOWEST: Duration = Duration::from_secs(30);

/// The re-listing of sessions' own connections (see the module docs); the
/// relay's, which hands it their `list_changed`.
pub(super) struct OwnLists {
    catalog: Arc<Catalog>,
    sessions: Arc<dyn SessionStore>,
    /// Per (session owner key, backend index): whether a fetch runs, whether
    /// another announcement came meanwhile, how the next one is spaced.
    paces: Mutex<HashMap<(Arc<str>, usize), Pace>>,
    /// The shared store (`[cluster] redis`), where the mark goes.
    shared: Option<Arc<SharedStore>>,
    /// Held while a mark is written, so that the last one written says what
    /// is true after the last change (each writes what it finds then).
    marking: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Pace {
    running: bool,
    again: bool,
    /// Fetches in a row that changed nothing.
    unchanged: u32,
    /// When the last fetch ended.
    last: Option<Instant>,
}

impl Pace {
    /// How long from now until the next fetch may start: none while fetches
    /// change something (or only one did not), then [`QUIET`] after the last,
    /// doubling per unchanged fetch up to [`SLOWEST`].
    fn until_due(&self) -> Duration {
        let spacing = match self.unchanged {
            0 | 1 => return Duration::ZERO,
            n => QUIET.saturating_mul(1 << (n - 2).min(16)).min(SLOWEST),
        };
        self.last.map_or(Duration::ZERO, |l| {
            (l + spacing).saturating_duration_since(Instant::now())
        })
    }
}

impl OwnLists {
    /// Re-lists of `catalog`'s per-session connections for `sessions`,
    /// marked in the `shared` store's records.
    pub(super) fn new(
        catalog: Arc<Catalog>,
        sessions: Arc<dyn SessionStore>,
        shared: Option<Arc<SharedStore>>,
    ) -> Self {
        OwnLists {
            catalog,
            sessions,
            paces: Mutex::default(),
            shared,
            marking: tokio::sync::Mutex::default(),
        }
    }

    /// Writes, with a shared store, which backends list otherwise for
    /// `session` now as its record's mark (`OwnerStore::mark_lists`: only
    /// while this replica owns the session; the other replicas are told when
    /// the mark appears or goes). A store that does not answer leaves the
    /// mark as it was: the other replicas list the catalogue, or hand their
    /// lists here.
    async fn mark(&self, session: &Session) {
        let Some(store) = &self.shared else {
            return;
        };
        let _one = self.marking.lock().await;
        let names: Vec<String> = self
            .catalog
            .own_backends(session.id())
            .into_iter()
            .map(|idx| self.catalog.backend(idx).spec.name.to_string())
            .collect();
        let marked = store
            .owner()
            .mark_lists(session.store_key(), &names.join(" "))
            .await;
        if marked.is_err() {
            tracing::debug!(session = %session.log_id(), "a session's own lists not marked in the shared store: it did not answer");
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<(Arc<str>, usize), Pace>) -> T) -> T {
        f(&mut self.paces.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Session `session`'s own connection `conn` to backend `idx` announced a
    /// list change: its lists are fetched on that connection and, where they
    /// differ from what the session saw, become the session's view of the
    /// backend; only that session is told which lists changed. Announcements
    /// while a fetch runs make one more fetch; after two fetches in a row that
    /// changed nothing the next waits (1 s after the last, doubling up to 30 s),
    /// so a backend announcing after every list is not re-listed in a loop.
    pub(super) fn changed(
        self: &Arc<Self>,
        conn: &Arc<Connection>,
        idx: usize,
        session: Arc<Session>,
    ) {
        let key = (session.id().clone(), idx);
        let start = self.with(|paces| {
            paces.retain(|(owner, _), p| p.running || self.sessions.get(owner).is_some());
            let pace = paces.entry(key.clone()).or_default();
            pace.again = pace.running;
            !std::mem::replace(&mut pace.running, true)
        });
        if !start {
            return;
        }
        let (me, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            loop {
                let wait = me.with(|p| p.get(&key).map(Pace::until_due));
                tokio::time::sleep(wait.unwrap_or_default()).await;
                let changed = match fetch(&conn).await {
                    Ok(fresh) => me.catalog.install_own(&key.0, idx, &conn, fresh),
                    Err(e) => {
                        tracing::debug!(backend = %conn.backend, cause = %e, "a session's own lists could not be fetched");
                        Vec::new()
                    }
                };
                if !changed.is_empty() {
                    me.mark(&session).await;
                }
                for c in &changed {
                    let n = jsonrpc::notification_bytes(c.method().as_str(), None);
                    session.send_unrelated(n.into());
                }
                let more = me.with(|paces| {
                    let Some(p) = paces.get_mut(&key) else {
                        return false;
                    };
                    p.unchanged = match changed.is_empty() {
                        true => p.unchanged.saturating_add(1),
                        false => 0,
                    };
                    p.last = Some(Instant::now());
                    let more = std::mem::take(&mut p.again) && conn.is_alive();
                    p.running = more;
                    more
                });
                if !more {
                    break;
                }
            }
        });
    }
}
