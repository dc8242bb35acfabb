//! The supervisor: the lifetime of backends and of host sessions' backend state.
//! It connects every backend, keeps shared connections healthy (ping, restart
//! with backoff), fetches catalogues into the [`Catalog`] and announces changes,
//! opens per-session connections on first use, ends and expires sessions, reloads
//! the backend set, reports readiness and shuts everything down.
//!
//! Per-request work is not here: that is the dispatch (host → backend) and the
//! relay (backend → host).

mod cluster;
mod listener;
mod owner;
mod pace;
mod pool;
mod reclaim;
mod reload;
mod sessions;
mod subscriptions;
mod tasks;
mod upstream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

pub use cluster::follow_cluster;
pub use reload::{ReloadReport, end_sessions_at, reload, reload_policy, reload_server};
pub use upstream::recorded_upstreams;

use crate::backend::{self, BackendError, Connection, Owner, backoff};
use crate::catalog::{BackendState, Catalog, fetch};
use crate::cluster::{Sealer, SharedStore};
use crate::config::{ConnectionMode, ServerConfig, Transport};
use crate::jsonrpc;
use crate::mcp::{Changed, LogLevel, Method};
use crate::metrics::Metrics;
use crate::relay::Relay;
use crate::session::{Session, SessionStore};

/// The supervisor; see the module docs.
pub struct Supervisor {
    /// `[server]` in force (a reload replaces it whole).
    server: Arc<ArcSwap<ServerConfig>>,
    catalog: Arc<Catalog>,
    sessions: Arc<dyn SessionStore>,
    relay: Arc<Relay>,
    metrics: Arc<Metrics>,
    /// Backends whose first connection attempt finished.
    loaded: watch::Sender<usize>,
    /// Backends whose first connection attempt `loaded` waits for.
    expected: AtomicUsize,
    stopping: AtomicBool,
    /// Refresh pacing per backend index (refreshes asked for by `list_changed`).
    paces: Mutex<HashMap<usize, pace::Pace>>,
    /// The per-session connection last opened for each (session, backend index):
    /// tells a new connection from a replacement and from one already set up.
    opened: Mutex<HashMap<SessionBackend, std::sync::Weak<Connection>>>,
    /// Per-session backends' connections for stateless requests, by (backend,
    /// caller and declared capabilities); see `sessions.rs`.
    pool: pool::Pool,
    /// The shared session store (`[cluster] redis`), if any: shutdown then
    /// drains instead of ending sessions (`cluster.rs`).
    shared: Option<Arc<SharedStore>>,
    /// Per-session HTTP backends' sessions in the shared store (with one).
    upstreams: Option<upstream::SharedUpstreams>,
    /// Where requests other replicas hand this one, the owner of their
    /// sessions' per-session children, go (`(h, sealed call)`, set by the HTTP
    /// face, which runs them: `owner.rs`).
    owner_calls: std::sync::OnceLock<mpsc::UnboundedSender<(String, String)>>,
    /// Connections standing by while another replica listens on their
    /// backend session (`listener.rs`).
    standbys: Arc<listener::Standbys>,
    /// The sessions that were owned here when this replica was fenced
    /// (`owner.rs`): checked against the store when it answers again.
    fenced: Mutex<Vec<Arc<Session>>>,
    /// Holders of sessions' subscriptions watched here (`subscriptions.rs`).
    holders: subscriptions::Holders,
}

/// A host session's id and a backend index.
type SessionBackend = (Arc<str>, usize);

impl Supervisor {
    /// A supervisor for `catalog`'s backends; call [`Supervisor::start`]. `sealer`
    /// seals backend sessions in `shared` (unused without a store).
    pub fn new(
        server: Arc<ArcSwap<ServerConfig>>,
        catalog: Arc<Catalog>,
        sessions: Arc<dyn SessionStore>,
        relay: Arc<Relay>,
        metrics: Arc<Metrics>,
        shared: Option<Arc<SharedStore>>,
        sealer: Arc<Sealer>,
    ) -> Arc<Supervisor> {
        let standbys = Arc::<listener::Standbys>::default();
        let upstreams = shared.as_ref().map(|store| upstream::SharedUpstreams {
            store: store.clone(),
            sealer,
            standbys: standbys.clone(),
            takeovers: metrics.cluster_listener_takeovers.clone(),
            catalog: catalog.clone(),
            relay: relay.clone(),
        });
        Arc::new(Supervisor {
            server,
            catalog,
            sessions,
            relay,
            metrics,
            loaded: watch::channel(0).0,
            expected: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            paces: Mutex::new(HashMap::new()),
            opened: Mutex::new(HashMap::new()),
            pool: Default::default(),
            shared,
            upstreams,
            owner_calls: std::sync::OnceLock::new(),
            standbys,
            fenced: Mutex::default(),
            holders: Default::default(),
        })
    }

    /// Connects every backend in the background and keeps the shared ones alive;
    /// `refreshes` carries the backends whose lists changed (from the relay).
    pub fn start(self: &Arc<Self>, refreshes: mpsc::UnboundedReceiver<usize>) {
        // Every backend's URI prefix routes from the start, so a backend that is
        // down answers with an error naming it, not "Resource not found".
        self.catalog.rebuild();
        for b in self.catalog.backends().active().iter() {
            self.launch(b);
        }
        tokio::spawn(self.clone().refresh_on_request(refreshes));
    }

    /// Starts supervising a backend (first connection, health checks, restarts).
    fn launch(self: &Arc<Self>, b: &Arc<BackendState>) {
        self.expected.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(self.clone().supervise(b.index));
    }

    /// Waits until every backend's first connection attempt finished, at most
    /// `limit`. Hosts that initialize right after start see complete lists.
    pub async fn wait_loaded(&self, limit: Duration) {
        if self.is_loaded() {
            return;
        }
        let want = self.expected.load(Ordering::Acquire);
        let mut rx = self.loaded.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n >= want)).await;
    }

    /// Keeps backend `idx`'s shared (or catalogue) connection alive: connects,
    /// health-checks it with `ping`, and reconnects with exponential backoff and
    /// jitter when it fails. A connection that dies within seconds counts as a
    /// failure, so a crash-looping child is backed off and reported down.
    async fn supervise(self: Arc<Self>, idx: usize) {
        let name = self.catalog.backend(idx).spec.name.clone();
        let up = self.metrics.backend_up.with_label_values(&[&name]);
        let mut first = true;
        let mut failures = 0u32;
        while !self.is_stopping() && !self.catalog.backend(idx).is_removed() {
            let outcome = self.refresh(idx).await;
            if first {
                self.loaded.send_modify(|n| *n += 1);
            } else {
                self.metrics
                    .backend_restarts
                    .with_label_values(&[&name])
                    .inc();
            }
            let restarted = !first;
            first = false;
            let health = &self.catalog.backend(idx).health;
            match outcome {
                Ok(conn) => {
                    up.set(1);
                    health.connected(restarted);
                    if restarted {
                        self.relay.subscriptions().resubscribe(idx, &conn);
                    }
                    backend::watch_lists(&conn);
                    let started = tokio::time::Instant::now();
                    self.watch(&conn).await;
                    up.set(0);
                    if self.is_stopping() {
                        return;
                    }
                    if self.catalog.backend(idx).is_removed() {
                        // A reload removed or replaced it: closed on purpose.
                        tracing::info!(backend = %name, "backend connection closed (removed by reload)");
                        break;
                    }
                    if started.elapsed() < Duration::from_secs(10) {
                        failures = failures.saturating_add(1);
                    } else {
                        failures = 0;
                    }
                    health.lost("connection lost");
                    tracing::warn!(backend = %name, "backend connection lost; reconnecting");
                }
                Err(e) => {
                    up.set(0);
                    health.failed(restarted, &e.to_string());
                    failures = failures.saturating_add(1);
                    self.metrics.fanout_partial_failures.inc();
                    tracing::warn!(backend = %name, cause = %e, failures, "backend not available");
                }
            }
            if failures > 0 {
                tokio::time::sleep(backoff(failures)).await;
            }
        }
        up.set(0);
    }

    /// Waits until `conn` closes, pinging it every `backend_ping_interval`; a
    /// backend that does not answer a ping within its timeout is closed (a dead
    /// child must not be reported healthy while requests to it hang).
    async fn watch(&self, conn: &Arc<Connection>) {
        loop {
            let every = self.server.load().backend_ping_interval;
            tokio::select! {
                _ = conn.closed.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let limit = conn.timeout().min(Duration::from_secs(10));
            if let Err(e) = conn.request(&Method::Ping, None, None, limit).await {
                if matches!(e, BackendError::Rpc(_)) {
                    continue; // it answered, if only with an error
                }
                tracing::warn!(backend = %conn.backend, cause = %e, "backend failed its health ping; restarting it");
                conn.close().await;
                return;
            }
        }
    }

    /// Re-fetches a backend's catalogue (connecting its shared or catalogue
    /// connection first) and, if it changed, tells every session which lists
    /// changed.
    async fn refresh(&self, idx: usize) -> Result<Arc<Connection>, BackendError> {
        self.refresh_changes(idx).await.map(|(conn, _)| conn)
    }

    /// [`Supervisor::refresh`], also telling which lists changed (none: the
    /// lists are the same as before, and nothing was announced).
    async fn refresh_changes(
        &self,
        idx: usize,
    ) -> Result<(Arc<Connection>, Vec<Changed>), BackendError> {
        let b = self.catalog.backend(idx);
        let _one_at_a_time = b.refreshing().await;
        let removed = || BackendError::closed(&b.spec.name, "removed by a configuration reload");
        if b.is_removed() {
            return Err(removed());
        }
        let conn = b
            .shared()
            .get(
                &b.spec,
                Owner::Shared,
                self.relay.handler(),
                sessions::shared_capabilities(),
            )
            .await?;
        self.metrics.list_cache.with_label_values(&["miss"]).inc();
        let fresh = fetch(&conn).await?;
        if b.is_removed() {
            // Removed while connecting: this connection belongs to no one.
            if let Some(c) = b.shared().take() {
                c.close().await;
            }
            return Err(removed());
        }
        let first = b.catalog().is_none();
        let changed = self.catalog.install(idx, fresh);
        if !changed.is_empty() && (!first || b.is_late()) {
            self.announce_changes(&changed);
        }
        Ok((conn, changed))
    }

    /// Serves the relay's requests to re-read a backend's lists (after its
    /// `list_changed`): bursts coalesce into one refresh, paced per backend
    /// (see [`pace`]) so a backend announcing after every list is not re-listed
    /// in a loop.
    async fn refresh_on_request(self: Arc<Self>, mut refreshes: mpsc::UnboundedReceiver<usize>) {
        while let Some(idx) = refreshes.recv().await {
            if !self.catalog.backend(idx).schedule_refresh() {
                continue;
            }
            tokio::spawn(self.clone().paced_refresh(idx));
        }
    }

    /// One refresh asked for by `list_changed`, once its pace allows.
    async fn paced_refresh(self: Arc<Self>, idx: usize) {
        let now = tokio::time::Instant::now;
        let mut wait = self.pace(idx, |p| p.until_due(now())).max(pace::QUIET);
        while !wait.is_zero() {
            tokio::time::sleep(wait).await;
            wait = self.pace(idx, |p| p.until_due(now()));
        }
        let b = self.catalog.backend(idx);
        b.refresh_started();
        self.pace(idx, |p| p.started(now()));
        let changed = match self.refresh_changes(idx).await {
            Ok((_, changed)) => !changed.is_empty(),
            Err(e) => {
                tracing::warn!(backend = %b.spec.name, cause = %e, "catalogue refresh after list_changed failed");
                false
            }
        };
        if let Some(every) = self.pace(idx, |p| p.finished(now(), changed)) {
            tracing::warn!(backend = %b.spec.name, every = ?every, "backend announces list changes that change nothing; re-listing it less often");
        }
    }

    /// Runs `f` on backend `idx`'s refresh pace.
    fn pace<T>(&self, idx: usize, f: impl FnOnce(&mut pace::Pace) -> T) -> T {
        let mut paces = self.paces.lock().unwrap_or_else(|e| e.into_inner());
        f(paces.entry(idx).or_default())
    }

    /// Tells every session, and every listen stream that asked, that the
    /// `changed` lists changed.
    fn announce_changes(&self, changed: &[Changed]) {
        self.relay.listens().announce(changed);
        for session in self.sessions.all() {
            for c in changed {
                // Every replica announces its own: never handed off.
                let n = jsonrpc::notification_bytes(c.method().as_str(), None);
                session.announce_here(n.into());
            }
        }
    }

    /// The shared session store, when one is configured.
    pub fn shared(&self) -> Option<&Arc<SharedStore>> {
        self.shared.as_ref()
    }

    /// Sets `session`'s log level and sends it to the session's own backend
    /// connections that log (MCP 2025-11-25 server/utilities/logging); those
    /// opened later get it when they open (`sessions.rs::reestablish`).
    pub fn apply_level(&self, session: &Session, level: LogLevel) {
        session.set_log_level(level);
        for conn in session.connections() {
            if conn.info().is_some_and(|i| i.has("logging")) {
                let params = json!({ "level": level.as_str() });
                tokio::spawn(async move {
                    let timeout = conn.timeout();
                    if let Err(e) = conn
                        .request(&Method::LoggingSetLevel, Some(params), None, timeout)
                        .await
                    {
                        tracing::debug!(backend = %conn.backend, cause = %e, "logging/setLevel refused");
                    }
                });
            }
        }
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Marks the gateway as shutting down: `/readyz` answers 503 and new
    /// sessions are refused from now on.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Whether every backend's first connection attempt has finished.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow() >= self.expected.load(Ordering::Acquire)
    }

    /// Readiness report: ready when loaded, not stopping, and every backend with
    /// `required = true` is up. The JSON lists each backend's state.
    pub fn readiness(&self) -> (bool, Value) {
        let mut backends = serde_json::Map::new();
        let mut ready = self.is_loaded() && !self.is_stopping();
        for b in self.catalog.backends().active().iter() {
            ready &= b.is_up() || !b.spec.config.required;
            backends.insert(b.spec.name.to_string(), backend_state(b));
        }
        let status = if self.is_stopping() {
            "stopping"
        } else if ready {
            "ready"
        } else {
            "not_ready"
        };
        (
            ready,
            json!({"status": status, "sessions": self.sessions.len(), "backends": backends}),
        )
    }

    /// Every active backend with its connection history, for the admin endpoint
    /// `/admin/backends`: `{"backends": {NAME: {"state": "up"|"down", "required",
    /// "mode", "stateful", "tools", "prompts", "resources", "transport":
    /// "stdio"|"http"|"sse", "target": COMMAND|URL, "restarts", "up_since",
    /// "last_error": {"at", "cause"}|null}}}` (times RFC 3339, UTC). URLs are shown
    /// without user info, query or fragment (they may carry credentials); no header or
    /// env value is.
    pub fn backends_report(&self) -> Value {
        let mut backends = serde_json::Map::new();
        for b in self.catalog.backends().active().iter() {
            let mut state = backend_state(b);
            let (transport, target) = match &b.spec.config.transport {
                Transport::Stdio { command, .. } => ("stdio", command.clone()),
                Transport::Http { url, .. } => ("http", without_query(url)),
                Transport::Sse { url, .. } => ("sse", without_query(url)),
            };
            if let (Some(obj), Value::Object(health)) = (state.as_object_mut(), b.health.snapshot())
            {
                obj.insert("transport".into(), json!(transport));
                obj.insert("target".into(), json!(target));
                obj.extend(health);
            }
            backends.insert(b.spec.name.to_string(), state);
        }
        json!({ "backends": backends })
    }

    /// Stops everything: answers the calls still in flight with an error, ends
    /// every session (with a shared store: releases it, for the other replicas
    /// to go on serving) and closes the shared connections.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.relay.listens().end_all();
        let sessions = self.sessions.all();
        futures_util::future::join_all(sessions.iter().map(|s| self.abandon_calls(s))).await;
        for s in sessions {
            if self.shared.is_some() {
                self.release_session(&s).await;
            } else {
                self.end_session(&s).await;
            }
        }
        for b in self.catalog.backends().active().iter() {
            if let Some(conn) = b.shared().take() {
                conn.close().await;
            }
        }
        for conn in self.pool.drain() {
            conn.close().await;
        }
    }
}

/// A backend's state as `/readyz` reports it.
fn backend_state(b: &BackendState) -> Value {
    let catalog = b.catalog();
    json!({
        "state": if b.is_up() { "up" } else { "down" },
        "required": b.spec.config.required,
        "mode": match b.mode {
            ConnectionMode::Shared => "shared",
            ConnectionMode::PerSession => "per_session",
            ConnectionMode::Auto => "auto",
        },
        "stateful": b.stateful_since().is_some(),
        "tools": catalog.as_ref().map_or(0, |c| c.tools.len()),
        "prompts": catalog.as_ref().map_or(0, |c| c.prompts.len()),
        "resources": catalog.as_ref().map_or(0, |c| c.resources.len()),
    })
}

/// `url` without user info, query and fragment (they may carry credentials).
fn without_query(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(invalid URL)".to_owned(),
    }
}
