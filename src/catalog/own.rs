//! A per-session backend connection's own lists. A stdio backend in
//! `per_session` mode serves each session with a child process of its own, which
//! may change what it lists for that session alone (a tool added by a call):
//! the backend's catalogue, fetched from its catalogue child, does not have it. Once such
//! a connection announces a change (`list_changed`) and its lists differ, they
//! are what its session sees of that backend: the session's view is the one its
//! key sees, rebuilt with those lists in place of the backend's catalogue. The
//! lists stay as long as their connection lives (a restarted child lists afresh).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};

use super::fetch::BackendCatalog;
use super::{Catalog, View, changed_lists};
use crate::auth::policy::ViewKey;
use crate::backend::Connection;
use crate::mcp::Changed;

/// Every session's own lists, by the session's owner key (what its exclusive
/// connections are owned by).
#[derive(Default)]
pub(super) struct OwnLists {
    sessions: RwLock<HashMap<Arc<str>, Own>>,
}

/// One session's own lists and the view last built with them.
#[derive(Default)]
struct Own {
    /// Backend index → the connection that listed them and its lists.
    lists: HashMap<usize, (Weak<Connection>, Arc<BackendCatalog>)>,
    /// (catalogue generation, view key) the view was built for, and the view.
    view: Option<(u64, ViewKey, Arc<View>)>,
}

impl Own {
    /// Forgets the lists of connections that closed; whether any are left.
    fn prune(&mut self) -> bool {
        let before = self.lists.len();
        self.lists
            .retain(|_, (c, _)| c.upgrade().is_some_and(|c| c.is_alive()));
        if self.lists.len() != before {
            self.view = None;
        }
        !self.lists.is_empty()
    }
}

impl Catalog {
    /// Stores what session `owner`'s own connection `conn` to backend `idx`
    /// lists now, and returns which lists changed for that session (against
    /// what it saw: its own earlier lists, else the backend's catalogue). Lists
    /// the same as the backend's catalogue are not kept. Sessions whose
    /// connections closed are forgotten here.
    pub fn install_own(
        &self,
        owner: &Arc<str>,
        idx: usize,
        conn: &Arc<Connection>,
        fresh: BackendCatalog,
    ) -> Vec<Changed> {
        let mut all = self.own.sessions.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|_, own| own.prune());
        let seen = all
            .get(owner)
            .and_then(|own| own.lists.get(&idx))
            .map(|(_, lists)| lists.clone())
            .or_else(|| self.backends.at(idx).catalog());
        let changed = changed_lists(seen.as_deref(), &fresh);
        if !changed.is_empty() {
            let global = self.backends.at(idx).catalog();
            let as_global = global.is_some_and(|g| changed_lists(Some(&g), &fresh).is_empty());
            let own = all.entry(owner.clone()).or_default();
            own.view = None;
            match as_global {
                // Back to what everyone sees: nothing of its own any more.
                true => drop(own.lists.remove(&idx)),
                false => drop(
                    own.lists
                        .insert(idx, (Arc::downgrade(conn), Arc::new(fresh))),
                ),
            }
            if own.lists.is_empty() {
                all.remove(owner);
            }
        }
        self.own_sessions.store(all.len(), Ordering::Relaxed);
        changed
    }

    /// The backends (registry indices) whose lists session `owner`'s own live
    /// connections list otherwise than the backend's catalogue; empty for
    /// most sessions (no lock taken while no session has any).
    pub fn own_backends(&self, owner: &str) -> Vec<usize> {
        if self.own_sessions.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let all = self.own.sessions.read().unwrap_or_else(|e| e.into_inner());
        let Some(own) = all.get(owner) else {
            return Vec::new();
        };
        let live = |c: &Weak<Connection>| c.upgrade().is_some_and(|c| c.is_alive());
        let mut out: Vec<usize> = own
            .lists
            .iter()
            .filter(|(_, (c, _))| live(c))
            .map(|(idx, _)| *idx)
            .collect();
        out.sort_unstable();
        out
    }

    /// Forgets session `owner`'s own lists (the session ended).
    pub fn forget_own(&self, owner: &str) {
        if self.own_sessions.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut all = self.own.sessions.write().unwrap_or_else(|e| e.into_inner());
        all.remove(owner);
        self.own_sessions.store(all.len(), Ordering::Relaxed);
    }

    /// The catalogue session `owner` sees with view key `key`: the key's view
    /// ([`Catalog::view_for_key`]) unless one of the session's own connections
    /// lists otherwise ([`Catalog::install_own`]); then that view with those
    /// lists in place of their backends' catalogues (built once per catalogue
    /// rebuild and change of lists).
    pub fn view_for_session(&self, key: &ViewKey, owner: &str) -> Arc<View> {
        // The common case, no session with lists of its own, takes no lock;
        // a session without any, a shared one.
        if self.own_sessions.load(Ordering::Relaxed) == 0 {
            return self.view_for_key(key);
        }
        let has_own = |all: &HashMap<Arc<str>, Own>| all.contains_key(owner);
        if !has_own(&self.own.sessions.read().unwrap_or_else(|e| e.into_inner())) {
            return self.view_for_key(key);
        }
        let generation = self.generation.load(Ordering::Relaxed);
        let mut all = self.own.sessions.write().unwrap_or_else(|e| e.into_inner());
        let Some(own) = all.get_mut(owner) else {
            return self.view_for_key(key);
        };
        if !own.prune() {
            all.remove(owner);
            self.own_sessions.store(all.len(), Ordering::Relaxed);
            return self.view_for_key(key);
        }
        if let Some((g, k, view)) = &own.view
            && *g == generation
            && k == key
        {
            return view.clone();
        }
        let backends = self.backends.snapshot();
        let catalogs: Vec<Option<Arc<BackendCatalog>>> = backends
            .iter()
            .map(|b| match own.lists.get(&b.index) {
                Some((_, lists)) => Some(lists.clone()),
                None => b.catalog(),
            })
            .collect();
        let view = Arc::new(self.build_for_key(&catalogs, key));
        own.view = Some((generation, key.clone(), view.clone()));
        view
    }
}
