//! Hot reload of the backend set (SIGHUP or a config file change): backends added,
//! removed or changed take effect without touching the sessions of the others.
//!
//! A changed backend is removed and added again under a new registry index, so no
//! per-session connection, subscription or route can mix the old and the new one.
//! A changed `[policy]` is compiled whole and swapped in ([`reload_policy`]);
//! `[auth]` is swapped by the gateway (`Gateway::reload`). `[server]` and
//! `[cluster]` are read at start only; a reload that changes them logs that a
//! restart is needed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Supervisor;
use crate::catalog::BackendState;
use crate::config::Config;
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

/// Applies the backends of a new, already validated configuration: removed and
/// changed backends are taken out of service, added and changed ones appended to
/// the registry and launched; every session is told its lists changed. Returns
/// once the new backends answered (or failed) their first connection, so a
/// caller that reloads and then lists sees them.
pub async fn reload(sup: &Arc<Supervisor>, config: &Config) -> ReloadReport {
    let mut report = ReloadReport::default();
    if format!("{:?}", config.server) != format!("{:?}", *sup.server) {
        tracing::warn!("[server] settings changed; they take effect after a restart");
    }
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
        let timeout = sup.server.request_timeout;
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

/// Takes a backend out of service: no new calls route to it, its shared and
/// per-session connections close (calls in flight fail with an error naming
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
    sup.relay.subscriptions().drop_backend(b.index);
    futures_util::future::join_all(closing.iter().map(|c| c.close())).await;
    // Gone from /metrics: a removed backend is not a backend that is down (a
    // changed one is added again under the same name, with a fresh series).
    let _ = sup.metrics.backend_up.remove_label_values(&[&b.spec.name]);
}
