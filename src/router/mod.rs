//! Router: everything between the two faces, and the only place that knows names
//! are namespaced. Owns the backends, their catalogues and the aggregated view.

pub mod catalog;
pub mod cursor;
mod dispatch;
pub mod names;
mod relay;
pub mod rewrite;
mod subscriptions;
pub mod view;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

pub use dispatch::Reply;

use crate::backend::{BackendError, BackendSpec, Connection, Owner, Slot, UpstreamHandler};
use crate::config::{Config, ConnectionMode, ServerConfig, uri_prefix};
use crate::jsonrpc;
use crate::session::{Session, SessionStore};
use catalog::BackendCatalog;
use cursor::CursorKey;
use view::{ToolFilterSet, View, ViewInput};

/// Runtime state of one configured backend.
pub struct BackendState {
    /// Position in the backend list (name order).
    pub index: usize,
    /// How to reach it.
    pub spec: BackendSpec,
    /// Tool/prompt name prefix (`""` = unprefixed).
    pub prefix: String,
    /// Resource URI prefix (`""` = unprefixed).
    pub uri_prefix: String,
    /// Connection mode.
    pub mode: ConnectionMode,
    tools: ToolFilterSet,
    /// The shared connection (shared mode) or the catalogue connection.
    shared: Slot,
    catalog: Mutex<Option<Arc<BackendCatalog>>>,
    refreshing: tokio::sync::Mutex<()>,
    refresh_scheduled: AtomicBool,
}

impl BackendState {
    /// The backend's catalogue, if fetched.
    pub fn catalog(&self) -> Option<Arc<BackendCatalog>> {
        self.catalog.lock().ok()?.clone()
    }
}

/// The router.
pub struct Router {
    /// `[server]` settings.
    pub server: ServerConfig,
    /// Backends in name order.
    pub backends: Vec<Arc<BackendState>>,
    /// Host sessions.
    pub sessions: Arc<dyn SessionStore>,
    view: RwLock<Arc<View>>,
    epoch: AtomicU64,
    key: CursorKey,
    loaded: watch::Sender<usize>,
    subs: subscriptions::Subscriptions,
    stopping: AtomicBool,
    me: Weak<Router>,
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
        let backends = config
            .backends
            .iter()
            .enumerate()
            .map(|(index, (name, b))| {
                let prefix = b.prefix(name).to_owned();
                Arc::new(BackendState {
                    index,
                    uri_prefix: uri_prefix(&prefix),
                    prefix,
                    mode: b.mode(),
                    tools: ToolFilterSet::new(&b.tools.include, &b.tools.exclude),
                    spec: BackendSpec::new(name, b.clone(), config.server.request_timeout),
                    shared: Slot::default(),
                    catalog: Mutex::new(None),
                    refreshing: tokio::sync::Mutex::new(()),
                    refresh_scheduled: AtomicBool::new(false),
                })
            })
            .collect();
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
            subs: subscriptions::Subscriptions::default(),
            stopping: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    fn handler(&self) -> Arc<dyn UpstreamHandler> {
        Arc::new(Handler(self.me.clone()))
    }

    /// Connects every backend in the background and keeps the shared ones alive
    /// (reconnecting with backoff after a crash).
    pub fn start(self: &Arc<Self>) {
        for b in &self.backends {
            tokio::spawn(self.clone().supervise(b.index));
        }
    }

    /// Waits until every backend's first connection attempt finished, at most
    /// `limit`. Hosts that initialize right after start see complete lists.
    pub async fn wait_loaded(&self, limit: Duration) {
        let want = self.backends.len();
        let mut rx = self.loaded.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n >= want)).await;
    }

    async fn supervise(self: Arc<Self>, idx: usize) {
        let mut first = true;
        let mut delay = Duration::from_millis(500);
        while !self.stopping.load(Ordering::Relaxed) {
            let outcome = self.refresh(idx).await;
            if first {
                first = false;
                self.loaded.send_modify(|n| *n += 1);
            }
            match outcome {
                Ok(conn) => {
                    delay = Duration::from_millis(500);
                    conn.closed.cancelled().await;
                }
                Err(e) => {
                    tracing::warn!(backend = %self.backends[idx].spec.name, cause = %e, retry_in = ?delay, "backend not available");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Re-fetches a backend's catalogue and, if it changed, rebuilds the view and
    /// tells every session which lists changed.
    pub(crate) async fn refresh(&self, idx: usize) -> Result<Arc<Connection>, BackendError> {
        let b = &self.backends[idx];
        let _one_at_a_time = b.refreshing.lock().await;
        let conn = b
            .shared
            .get(&b.spec, Owner::Shared, self.handler(), json!({}))
            .await?;
        let fresh = catalog::fetch(&conn).await?;
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
            if old.is_some() {
                self.announce_changes(changed);
            }
        }
        Ok(conn)
    }

    /// Schedules a catalogue refresh of backend `idx` shortly, coalescing bursts
    /// of `list_changed` into one refresh and one announcement.
    pub(crate) fn schedule_refresh(&self, idx: usize) {
        let b = &self.backends[idx];
        if b.refresh_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            me.backends[idx]
                .refresh_scheduled
                .store(false, Ordering::Release);
            if let Err(e) = me.refresh(idx).await {
                tracing::warn!(backend = %me.backends[idx].spec.name, cause = %e, "catalogue refresh after list_changed failed");
            }
        });
    }

    fn rebuild_view(&self) {
        // Held from reading the catalogues to publishing the view: concurrent
        // rebuilds (backends loading at start) must not let an older build, which
        // missed a catalogue set meanwhile, overwrite a newer one.
        let mut current = self.view.write().unwrap_or_else(|e| e.into_inner());
        let catalogs: Vec<Option<Arc<BackendCatalog>>> =
            self.backends.iter().map(|b| b.catalog()).collect();
        let inputs: Vec<ViewInput<'_>> = self
            .backends
            .iter()
            .zip(&catalogs)
            .map(|(b, cat)| ViewInput {
                name: &b.spec.name,
                prefix: &b.prefix,
                uri_prefix: &b.uri_prefix,
                tools: &b.tools,
                catalog: cat.as_deref(),
            })
            .collect();
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let view = View::build(
            &inputs,
            epoch,
            self.server.page_size,
            self.server.max_name_len,
            self.key.clone(),
        );
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
        let b = &self.backends[idx];
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
                let caps = client_capabilities_for_backend(&session.client_capabilities);
                let conn = slot
                    .get(
                        &b.spec,
                        Owner::Session(Arc::downgrade(session)),
                        self.handler(),
                        caps,
                    )
                    .await?;
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
        for slot in slots {
            if let Some(conn) = slot.take() {
                conn.close().await;
            }
        }
    }

    /// Stops everything: ends every session and closes the shared connections.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for s in self.sessions.all() {
            self.end_session(&s).await;
        }
        for b in &self.backends {
            if let Some(conn) = b.shared.take() {
                conn.close().await;
            }
        }
    }

    /// Ends sessions idle longer than the configured timeout.
    pub async fn expire_idle(&self) {
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
