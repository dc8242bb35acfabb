//! Router: everything between the two faces, and the only place that knows names
//! are namespaced. Owns the backends, their catalogues and the aggregated view.

pub mod access;
pub mod backends;
pub mod catalog;
pub mod curation;
pub mod cursor;
mod dispatch;
pub mod names;
mod pages;
mod relay;
pub mod reload;
pub mod rewrite;
mod subscriptions;
pub mod tasks;
pub mod view;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

pub use dispatch::Reply;

use crate::backend::{BackendError, Connection, Owner, UpstreamHandler};
use crate::config::{Config, ConnectionMode, ServerConfig};
use crate::jsonrpc;
use crate::session::{Session, SessionStore};
pub use backends::{BackendState, Backends};
use catalog::BackendCatalog;
use cursor::CursorKey;
use view::View;

/// The router.
pub struct Router {
    /// `[server]` settings.
    pub server: ServerConfig,
    /// Backends by stable index.
    pub backends: Backends,
    /// Host sessions.
    pub sessions: Arc<dyn SessionStore>,
    view: RwLock<Arc<View>>,
    epoch: AtomicU64,
    key: CursorKey,
    loaded: watch::Sender<usize>,
    /// Backends whose first connection attempt `loaded` waits for.
    expected: std::sync::atomic::AtomicUsize,
    subs: subscriptions::Subscriptions,
    /// Task statuses that arrived before their task was registered.
    early_status: tasks::EarlyStatuses,
    /// Metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    stopping: AtomicBool,
    me: Weak<Router>,
    /// The authorization policy and its per-view catalogues.
    access: access::Access,
}

/// Forwards backend events to the router without keeping it alive.
struct Handler(Weak<Router>);

impl UpstreamHandler for Handler {
    fn on_notification(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<crate::session::HostCall>>,
        n: jsonrpc::Notification,
    ) {
        if let Some(r) = self.0.upgrade() {
            r.on_backend_notification(conn, call, n);
        }
    }

    fn on_request(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<crate::session::HostCall>>,
        req: jsonrpc::Request,
    ) {
        match self.0.upgrade() {
            Some(r) => r.on_backend_request(conn, call.as_ref(), &req),
            None => conn.respond(
                &req.id,
                Err(&jsonrpc::ErrorObject::new(
                    jsonrpc::INTERNAL_ERROR,
                    "gateway is shutting down",
                )),
            ),
        }
    }

    fn on_closed(&self, _conn: &Arc<Connection>) {}
}

impl Router {
    /// Builds the router for `config`; call [`Router::start`] to connect backends.
    pub fn new(config: &Config, sessions: Arc<dyn SessionStore>) -> Arc<Router> {
        let backends = Backends::default();
        for (name, b) in &config.backends {
            backends.push(|index| BackendState::new(index, name, b, config.server.request_timeout));
        }
        let key = CursorKey::random();
        let view = View::build(
            &[],
            0,
            config.server.page_size,
            config.server.max_name_len,
            key.clone(),
        );
        Arc::new_cyclic(|me| Router {
            server: config.server.clone(),
            backends,
            sessions,
            view: RwLock::new(Arc::new(view)),
            epoch: AtomicU64::new(0),
            key,
            loaded: watch::channel(0).0,
            expected: std::sync::atomic::AtomicUsize::new(0),
            subs: subscriptions::Subscriptions::default(),
            early_status: tasks::EarlyStatuses::default(),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            stopping: AtomicBool::new(false),
            me: me.clone(),
            access: access::Access::new(&config.policy),
        })
    }

    fn handler(&self) -> Arc<dyn UpstreamHandler> {
        Arc::new(Handler(self.me.clone()))
    }

    /// Connects every backend in the background and keeps the shared ones alive
    /// (reconnecting with backoff after a crash).
    pub fn start(self: &Arc<Self>) {
        // Every backend's URI prefix routes from the start, so a backend that is
        // down answers with an error naming it, not "Resource not found".
        self.rebuild_view();
        for b in self.backends.active().iter() {
            self.launch(b);
        }
    }

    /// Waits until every backend's first connection attempt finished, at most
    /// `limit`. Hosts that initialize right after start see complete lists.
    pub async fn wait_loaded(&self, limit: Duration) {
        let want = self.expected.load(Ordering::Acquire);
        let mut rx = self.loaded.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n >= want)).await;
    }

    /// Keeps backend `idx`'s shared (or catalogue) connection alive: connects,
    /// health-checks it with `ping`, and reconnects with exponential backoff and
    /// jitter when it fails. A connection that dies within seconds counts as a
    /// failure, so a crash-looping child is backed off and reported down.
    async fn supervise(self: Arc<Self>, idx: usize) {
        let name = self.backends.at(idx).spec.name.clone();
        let up = self.metrics.backend_up.with_label_values(&[&name]);
        let mut first = true;
        let mut failures = 0u32;
        while !self.stopping.load(Ordering::Relaxed) && !self.backends.at(idx).is_removed() {
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
            match outcome {
                Ok(conn) => {
                    up.set(1);
                    if restarted {
                        self.resubscribe(idx, &conn);
                    }
                    let started = tokio::time::Instant::now();
                    self.watch(&conn).await;
                    up.set(0);
                    if self.stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    if self.backends.at(idx).is_removed() {
                        // A reload removed or replaced it: closed on purpose.
                        tracing::info!(backend = %name, "backend connection closed (removed by reload)");
                        break;
                    }
                    if started.elapsed() < Duration::from_secs(10) {
                        failures = failures.saturating_add(1);
                    } else {
                        failures = 0;
                    }
                    tracing::warn!(backend = %name, "backend connection lost; reconnecting");
                }
                Err(e) => {
                    up.set(0);
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
        let every = self.server.backend_ping_interval;
        loop {
            tokio::select! {
                _ = conn.closed.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let limit = conn.timeout().min(Duration::from_secs(10));
            if let Err(e) = conn.request("ping", None, None, limit).await {
                if matches!(e, BackendError::Rpc(_)) {
                    continue; // it answered, if only with an error
                }
                tracing::warn!(backend = %conn.backend, cause = %e, "backend failed its health ping; restarting it");
                conn.close().await;
                return;
            }
        }
    }

    /// Re-fetches a backend's catalogue and, if it changed, rebuilds the view and
    /// tells every session which lists changed.
    pub(crate) async fn refresh(&self, idx: usize) -> Result<Arc<Connection>, BackendError> {
        let b = &self.backends.at(idx);
        let _one_at_a_time = b.refreshing.lock().await;
        if b.is_removed() {
            return Err(BackendError::closed(
                &b.spec.name,
                "removed by a configuration reload",
            ));
        }
        let conn = b
            .shared
            .get(&b.spec, Owner::Shared, self.handler(), json!({}))
            .await?;
        self.metrics.list_cache.with_label_values(&["miss"]).inc();
        let fresh = catalog::fetch(&conn).await?;
        if b.is_removed() {
            // Removed while connecting: this connection belongs to no one.
            if let Some(c) = b.shared.take() {
                c.close().await;
            }
            return Err(BackendError::closed(
                &b.spec.name,
                "removed by a configuration reload",
            ));
        }
        let old = b.catalog();
        let changed = [
            old.as_ref().is_none_or(|o| o.tools != fresh.tools),
            old.as_ref().is_none_or(|o| o.prompts != fresh.prompts),
            old.as_ref()
                .is_none_or(|o| o.resources != fresh.resources || o.templates != fresh.templates),
        ];
        if let Ok(mut c) = b.catalog.lock() {
            *c = Some(Arc::new(fresh));
        }
        if changed.iter().any(|c| *c) {
            self.rebuild_view();
            if old.is_some() || b.late.load(Ordering::Acquire) {
                self.announce_changes(changed);
            }
        }
        Ok(conn)
    }

    /// Schedules a catalogue refresh of backend `idx` shortly, coalescing bursts
    /// of `list_changed` into one refresh and one announcement.
    pub(crate) fn schedule_refresh(&self, idx: usize) {
        let b = &self.backends.at(idx);
        if b.refresh_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            me.backends
                .at(idx)
                .refresh_scheduled
                .store(false, Ordering::Release);
            if let Err(e) = me.refresh(idx).await {
                tracing::warn!(backend = %me.backends.at(idx).spec.name, cause = %e, "catalogue refresh after list_changed failed");
            }
        });
    }

    fn rebuild_view(&self) {
        // Held from reading the catalogues to publishing the view: concurrent
        // rebuilds (backends loading at start) must not let an older build, which
        // missed a catalogue set meanwhile, overwrite a newer one.
        let mut current = self.view.write().unwrap_or_else(|e| e.into_inner());
        let backends = self.backends.snapshot();
        let catalogs: Vec<Option<Arc<BackendCatalog>>> =
            backends.iter().map(|b| b.catalog()).collect();
        let inputs = backends::view_inputs(&backends, &catalogs);
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let view = View::build(
            &inputs,
            epoch,
            self.server.page_size,
            self.server.max_name_len,
            self.key.clone(),
        );
        self.access.record(epoch, catalogs.clone());
        *current = Arc::new(view);
    }

    fn announce_changes(&self, changed: [bool; 3]) {
        let methods = [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ];
        for session in self.sessions.all() {
            for (method, _) in methods.iter().zip(changed).filter(|(_, c)| *c) {
                session.send_unrelated(jsonrpc::notification_bytes(method, None).into());
            }
        }
    }

    /// The current aggregated view.
    pub fn view(&self) -> Arc<View> {
        self.view
            .read()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The connection that serves `session` on backend `idx`: the shared one, or
    /// the session's own (created on first use, declaring only the client
    /// capabilities the host declared).
    pub async fn connection_for(
        &self,
        idx: usize,
        session: &Arc<Session>,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = &self.backends.at(idx);
        if b.is_removed() {
            return Err(BackendError::closed(
                &b.spec.name,
                "removed by a configuration reload",
            ));
        }
        match b.mode {
            ConnectionMode::Shared => {
                b.shared
                    .get(&b.spec, Owner::Shared, self.handler(), json!({}))
                    .await
            }
            ConnectionMode::PerSession => {
                let slot = {
                    let mut u = session.upstreams.lock().map_err(|_| {
                        BackendError::closed(&b.spec.name, "session state poisoned")
                    })?;
                    u.entry(idx).or_default().clone()
                };
                if let Some(conn) = slot.current() {
                    return Ok(conn);
                }
                let limit = b.spec.config.max_connections;
                if b.per_session_open.load(Ordering::Acquire) >= limit {
                    self.metrics
                        .rejections
                        .with_label_values(&["backend_busy"])
                        .inc();
                    return Err(BackendError::closed(
                        &b.spec.name,
                        format!("busy: {limit} per-session connections are open (max_connections)"),
                    ));
                }
                let caps = client_capabilities_for_backend(&session.client_capabilities);
                let conn = slot
                    .get(
                        &b.spec,
                        Owner::Session(Arc::downgrade(session)),
                        self.handler(),
                        caps,
                    )
                    .await?;
                count_open(b, &conn);
                if session.closed.is_cancelled() {
                    conn.close().await;
                    return Err(BackendError::closed(&b.spec.name, "session ended"));
                }
                Ok(conn)
            }
        }
    }

    /// Ends a session: forgets it and closes its backend connections (HTTP
    /// `DELETE` upstream, stdio children stopped).
    pub async fn end_session(&self, session: &Arc<Session>) {
        self.sessions.remove(&session.id);
        self.drop_subscriptions(session);
        let slots = session.end();
        let calls: Vec<_> = session
            .inflight
            .lock()
            .map(|mut m| m.drain().map(|(_, c)| c).collect())
            .unwrap_or_default();
        for call in calls {
            if let Some((conn, id)) = call.upstream() {
                conn.cancel(id, Some("session ended"));
            }
        }
        let closing = slots
            .iter()
            .filter_map(|s| s.take())
            .map(|conn| async move {
                conn.close().await;
            });
        futures_util::future::join_all(closing).await;
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Marks the gateway as shutting down (`/readyz` answers 503 from now on).
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Whether every backend's first connection attempt has finished.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow() >= self.expected.load(Ordering::Acquire)
    }

    /// Host requests in flight across all sessions.
    pub fn calls_in_flight(&self) -> usize {
        self.sessions
            .all()
            .iter()
            .map(|s| s.inflight.lock().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    /// Readiness report: ready when loaded, not stopping, and every backend with
    /// `required = true` is up. The JSON lists each backend's state.
    pub fn readiness(&self) -> (bool, Value) {
        let mut backends = serde_json::Map::new();
        let mut ready = self.is_loaded() && !self.is_stopping();
        for b in self.backends.active().iter() {
            let up = b.is_up();
            let required = b.spec.config.required;
            ready &= up || !required;
            let catalog = b.catalog();
            backends.insert(
                b.spec.name.to_string(),
                json!({
                    "state": if up { "up" } else { "down" },
                    "required": required,
                    "mode": match b.mode { ConnectionMode::Shared => "shared", ConnectionMode::PerSession => "per_session" },
                    "tools": catalog.as_ref().map_or(0, |c| c.tools.len()),
                    "prompts": catalog.as_ref().map_or(0, |c| c.prompts.len()),
                    "resources": catalog.as_ref().map_or(0, |c| c.resources.len()),
                }),
            );
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

    /// Stops everything: ends every session and closes the shared connections.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for s in self.sessions.all() {
            self.end_session(&s).await;
        }
        for b in self.backends.active().iter() {
            if let Some(conn) = b.shared.take() {
                conn.close().await;
            }
        }
    }

    /// Closes per-session backend connections unused for longer than their
    /// backend's `idle_timeout` (they reopen on the next call).
    async fn close_idle_connections(&self) {
        let mut idle = Vec::new();
        for s in self.sessions.all() {
            let Ok(u) = s.upstreams.lock() else { continue };
            for (idx, slot) in u.iter() {
                let limit = self.backends.at(*idx).spec.config.idle_timeout;
                if let Some(c) = slot.current()
                    && c.in_flight() == 0
                    && c.idle_for() > limit
                {
                    idle.push((slot.clone(), c));
                }
            }
        }
        for (slot, conn) in idle {
            if slot.current().is_some_and(|c| Arc::ptr_eq(&c, &conn)) {
                slot.take();
                tracing::debug!(backend = %conn.backend, "closing an idle per-session connection");
                conn.close().await;
            }
        }
    }

    /// Ends sessions idle longer than the configured timeout.
    pub async fn expire_idle(&self) {
        self.close_idle_connections().await;
        let expired = self.sessions.take_expired(
            tokio::time::Instant::now(),
            self.server.session_idle_timeout,
        );
        for s in expired {
            tracing::info!(session = %crate::session::log_id(&s.id), "session expired");
            self.end_session(&s).await;
        }
    }
}

/// Counts a new per-session connection until it closes.
fn count_open(b: &Arc<BackendState>, conn: &Arc<Connection>) {
    b.per_session_open.fetch_add(1, Ordering::AcqRel);
    let b = b.clone();
    let closed = conn.closed.clone();
    tokio::spawn(async move {
        closed.cancelled().await;
        b.per_session_open.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Reconnect delay after `failures` consecutive failures: 0.5 s doubling to 30 s,
/// with ±20 % jitter so replicas do not retry in lockstep.
fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(500).saturating_mul(1 << failures.min(6).saturating_sub(1));
    let base = base.min(Duration::from_secs(30));
    let mut b = [0u8; 1];
    let _ = getrandom::fill(&mut b);
    let factor = 0.8 + 0.4 * f64::from(b[0]) / 255.0;
    base.mul_f64(factor)
}

/// The client capabilities a per-session backend connection declares: only those
/// the host declared and the gateway relays (MCP 2025-11-25 checklist §8.5).
fn client_capabilities_for_backend(host: &Value) -> Value {
    let mut caps = serde_json::Map::new();
    for key in ["roots", "sampling", "elicitation"] {
        if let Some(v) = host.get(key).filter(|v| v.is_object()) {
            caps.insert(key.into(), v.clone());
        }
    }
    Value::Object(caps)
}
