//! Hot reload of the backend set (SIGHUP or a config file change): backends added,
//! removed or changed take effect without touching the sessions of the others.
//!
//! A changed backend is removed and added again under a new registry index, so no
//! per-session connection, subscription or route can mix the old and the new one.
//! A changed `[policy]` is compiled whole and swapped in ([`reload_policy`]); the
//! `[server]` settings the supervisor, the session store and the catalogue read
//! are put in force by [`reload_server`]; the sessions of endpoints a reload
//! removed or moved end ([`end_sessions_at`]). `[auth]` and the server face are
//! swapped by the gateway (`Gateway::reload`, `src/reload.rs`), which also
//! decides what needs a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::Supervisor;
use crate::catalog::BackendState;
use crate::config::{Config, ServerConfig};
use crate::mcp::Changed;

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Backends that were added.
    pub added: Vec<String>,
    /// Backends that were removed.
    pub removed: Vec<String>,
    /// Backends whose settings changed (restarted).
    pub changed: Vec<String>,
    /// Whether `[policy]` was replaced.
    pub policy: bool,
    /// Whether `[auth]` was replaced.
    pub auth: bool,
    /// The `[server]` settings that changed and are in force now (field names,
    /// e.g. `rate_limit`).
    pub server: Vec<&'static str>,
    /// Settings that changed in the file but need a restart (e.g.
    /// `server.listen`, `cluster`): the running values stay, each is logged.
    pub restart: Vec<&'static str>,
    /// Endpoints (`[endpoints.NAME]`; `""`: the one at `server.path`) whose
    /// path serves from now on.
    pub endpoints_added: Vec<String>,
    /// Endpoints whose path answers 404 from now on.
    pub endpoints_removed: Vec<String>,
    /// Endpoints served at another path from now on.
    pub endpoints_moved: Vec<String>,
    /// Sessions ended because their endpoint was removed or moved.
    pub sessions_ended: usize,
    /// Why the reload changed nothing, if it was refused.
    pub refused: Option<String>,
}

impl ReloadReport {
    /// Whether the backend set changed at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// A reload that changed nothing because of `why`.
    pub fn refused(why: String) -> Self {
        ReloadReport {
            refused: Some(why),
            ..Default::default()
        }
    }
}

/// Puts a new, validated `[policy]` in force for every session at once: the
/// catalogue compiles it as a new generation (no view mixes old and new rules),
/// unauthenticated sessions get their view from it now (an authenticated one
/// gets it at its next request, which re-derives its view from its token), and
/// every host is told its lists changed.
pub fn reload_policy(
    sup: &Supervisor,
    policy: &crate::config::PolicyConfig,
    endpoints: &std::collections::BTreeMap<String, crate::config::EndpointConfig>,
) {
    sup.catalog.set_policy(policy, endpoints);
    for s in sup.sessions.all() {
        if s.principal().is_none() {
            s.set_view_key(sup.catalog.view_key_at(s.endpoint(), None));
        }
    }
    sup.announce_changes(&Changed::ALL);
}

/// Puts new `[server]` settings in force for what outlives a request: the
/// supervisor's own reads (idle expiry, health pings), the session cap (and
/// its gauge), the shared store's record lifetime, the default call timeout of
/// backends without their own, the catalogue's page size and name length (a
/// change rebuilds the views and tells every host its lists changed). Sessions
/// and calls in progress keep going: a lowered cap ends no session.
pub fn reload_server(sup: &Supervisor, server: &ServerConfig) {
    sup.server.store(Arc::new(server.clone()));
    sup.sessions
        .set_limits(server.max_sessions, server.sessions_per_client());
    sup.metrics
        .sessions_max
        .set(i64::try_from(server.max_sessions).unwrap_or(i64::MAX));
    if let Some(store) = &sup.shared {
        store.set_record_ttl(server.session_idle_timeout);
    }
    for b in sup.catalog.backends().active() {
        b.spec.set_default_timeout(server.request_timeout);
    }
    if sup
        .catalog
        .set_paging(server.page_size, server.max_name_len)
    {
        sup.announce_changes(&Changed::ALL);
    }
}

/// Ends every session opened at one of `endpoints` (names; `""` is the single
/// endpoint of a gateway without `[endpoints]`), as a `DELETE` would: for
/// every replica when a shared store holds it, streams closed, calls cancelled
/// upstream, backend sessions ended. For endpoints a reload removed or moved:
/// their hosts' URL no longer serves them. Returns how many ended.
pub async fn end_sessions_at(sup: &Supervisor, endpoints: &BTreeSet<String>) -> usize {
    let ending: Vec<_> = sup
        .sessions
        .all()
        .into_iter()
        .filter(|s| endpoints.contains(s.endpoint()))
        .collect();
    for s in &ending {
        sup.sessions.remove(s.id());
    }
    // Concurrently: each shared-store end may wait for its deadline.
    futures_util::future::join_all(ending.iter().map(|s| async move {
        if let Some(store) = &sup.shared {
            store.end(s.store_key()).await;
        }
        sup.end_session(s).await;
    }))
    .await;
    ending.len()
}

/// Applies the backends of a new, already validated configuration: removed and
/// changed backends are taken out of service, added and changed ones appended to
/// the registry and launched; every session is told its lists changed. Returns
/// once the new backends answered (or failed) their first connection, so a
/// caller that reloads and then lists sees them.
pub async fn reload(sup: &Arc<Supervisor>, config: &Config) -> ReloadReport {
    let mut report = ReloadReport::default();
    let current: BTreeMap<String, Arc<BackendState>> = sup
        .catalog
        .backends()
        .active()
        .into_iter()
        .map(|b| (b.spec.name.to_string(), b))
        .collect();
    for (name, b) in &current {
        if !config.backends.contains_key(name) {
            report.removed.push(name.clone());
            remove_backend(sup, b).await;
        }
    }
    for (name, cfg) in &config.backends {
        match current.get(name) {
            Some(b) if format!("{:?}", b.spec.config) == format!("{cfg:?}") => continue,
            Some(b) => {
                report.changed.push(name.clone());
                remove_backend(sup, b).await;
            }
            None => report.added.push(name.clone()),
        }
        let timeout = sup.server.load().request_timeout;
        let b = sup
            .catalog
            .backends()
            .push(|index| BackendState::new(index, name, cfg, timeout));
        b.mark_late();
        sup.launch(&b);
    }
    if !report.removed.is_empty() || !report.changed.is_empty() {
        sup.catalog.rebuild();
        sup.announce_changes(&Changed::ALL);
    }
    sup.wait_loaded(std::time::Duration::from_secs(10)).await;
    tracing::info!(added = ?report.added, removed = ?report.removed, changed = ?report.changed, "configuration reloaded");
    report
}

/// Takes a backend out of service: no new calls route to it, its shared,
/// per-session and pooled connections close (calls in flight fail with an error naming
/// it), its subscriptions are forgotten.
async fn remove_backend(sup: &Supervisor, b: &Arc<BackendState>) {
    b.mark_removed();
    let mut closing = Vec::new();
    if let Some(c) = b.shared().take() {
        closing.push(c);
    }
    for s in sup.sessions.all() {
        if let Some(c) = s.take_slot(b.index).and_then(|slot| slot.take()) {
            closing.push(c);
        }
    }
    closing.extend(sup.pool.take_backend(b.index));
    sup.relay.subscriptions().drop_backend(b.index);
    futures_util::future::join_all(closing.iter().map(|c| c.close())).await;
    // Gone from /metrics: a removed backend is not a backend that is down (a
    // changed one is added again under the same name, with a fresh series).
    let _ = sup.metrics.backend_up.remove_label_values(&[&b.spec.name]);
}
