//! Hot reload of the backend set (SIGHUP or a config file change): backends added,
//! removed or changed take effect without touching the sessions of the others.
//!
//! A changed backend is removed and added again under a new registry index, so no
//! per-session connection, subscription or route can mix the old and the new one.
//! `[server]`, `[auth]` and `[policy]` are read at start only; a reload that changes
//! them logs that a restart is needed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{BackendState, Router};
use crate::config::Config;

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Backends that were added.
    pub added: Vec<String>,
    /// Backends that were removed.
    pub removed: Vec<String>,
    /// Backends whose settings changed (restarted).
    pub changed: Vec<String>,
}

impl ReloadReport {
    /// Whether the backend set changed at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl Router {
    /// Starts supervising a backend (first connection, health checks, restarts).
    pub(super) fn launch(self: &Arc<Self>, b: &Arc<BackendState>) {
        self.expected.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(self.clone().supervise(b.index));
    }

    /// Applies the backends of a new, already validated configuration.
    pub async fn reload(self: &Arc<Self>, config: &Config) -> ReloadReport {
        let mut report = ReloadReport::default();
        if format!("{:?}", config.server) != format!("{:?}", self.server) {
            tracing::warn!("[server] settings changed; they take effect after a restart");
        }
        let current: BTreeMap<String, Arc<BackendState>> = self
            .backends
            .active()
            .into_iter()
            .map(|b| (b.spec.name.to_string(), b))
            .collect();
        for (name, b) in &current {
            if !config.backends.contains_key(name) {
                report.removed.push(name.clone());
                self.remove_backend(b).await;
            }
        }
        for (name, cfg) in &config.backends {
            match current.get(name) {
                Some(b) if format!("{:?}", b.spec.config) == format!("{cfg:?}") => continue,
                Some(b) => {
                    report.changed.push(name.clone());
                    self.remove_backend(b).await;
                }
                None => report.added.push(name.clone()),
            }
            let timeout = self.server.request_timeout;
            let b = self
                .backends
                .push(|index| BackendState::new(index, name, cfg, timeout));
            b.late.store(true, Ordering::Release);
            self.launch(&b);
        }
        if !report.removed.is_empty() || !report.changed.is_empty() {
            self.rebuild_view();
            self.announce_changes([true, true, true]);
        }
        // Return once the new backends answered (or failed) their first connection,
        // so a caller that reloads and then lists sees them.
        self.wait_loaded(std::time::Duration::from_secs(10)).await;
        tracing::info!(added = ?report.added, removed = ?report.removed, changed = ?report.changed, "configuration reloaded");
        report
    }

    /// Takes a backend out of service: no new calls route to it, its shared and
    /// per-session connections close (calls in flight fail with an error naming
    /// it), its subscriptions are forgotten.
    async fn remove_backend(&self, b: &Arc<BackendState>) {
        b.mark_removed();
        let mut closing = Vec::new();
        if let Some(c) = b.shared.take() {
            closing.push(c);
        }
        for s in self.sessions.all() {
            let slot = s.upstreams.lock().ok().and_then(|mut u| u.remove(&b.index));
            if let Some(c) = slot.and_then(|slot| slot.take()) {
                closing.push(c);
            }
        }
        self.subs.drop_backend(b.index);
        futures_util::future::join_all(closing.iter().map(|c| c.close())).await;
        self.metrics
            .backend_up
            .with_label_values(&[&b.spec.name])
            .set(0);
    }
}
