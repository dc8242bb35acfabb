//! mcpgate: a Model Context Protocol gateway.
//!
//! Hosts talk MCP Streamable HTTP to one endpoint (`http`, the server face); the
//! `dispatch` routes their requests by namespaced name through the `catalog` to
//! `backend` connections (the client face: stdio children and remote Streamable
//! HTTP servers), which the `supervisor` keeps alive; the `relay` carries what
//! backends send on their own back to exactly the right host `session`.
//! [`Gateway::start`] wires everything for `main` and tests; docs/architecture.md
//! is the map.

mod auth;
mod backend;
mod catalog;
mod cluster;
pub mod config;
mod dispatch;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod jsonrpc;
pub mod logging;
pub mod mcp;
pub mod memory;
mod metrics;
mod relay;
mod reload;
mod request;
mod session;
pub mod streamable_http;
mod supervisor;
pub mod telemetry;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use supervisor::ReloadReport;

use crate::auth::{AuthHandle, Authenticator};
use crate::catalog::Catalog;
use crate::config::{Config, ServerConfig};
use crate::dispatch::Dispatch;
use crate::http::{AppState, LiveApp, OriginPolicy};
use crate::metrics::Metrics;
use crate::relay::Relay;
use crate::session::{MemoryStore, SessionStore};
use crate::supervisor::Supervisor;

/// A running gateway.
pub struct Gateway {
    /// The address the MCP endpoint listens on.
    pub local_addr: SocketAddr,
    /// The address of the `/metrics` listener, if it is running.
    pub metrics_addr: Option<SocketAddr>,
    sessions: Arc<dyn SessionStore>,
    supervisor: Arc<Supervisor>,
    catalog: Arc<Catalog>,
    metrics: Arc<Metrics>,
    auth: Option<Arc<AuthHandle>>,
    /// `[server]` in force, shared with the supervisor (a reload replaces it).
    server: Arc<ArcSwap<ServerConfig>>,
    /// The server face in force, and the generation it was built from (the
    /// next one is built from it: `src/reload.rs`).
    face: Arc<LiveApp<http::Face>>,
    state: std::sync::Mutex<AppState>,
    /// The metrics listener's application (admin endpoints on or off).
    metrics_face: Option<Arc<LiveApp>>,
    /// The rate limiter in force, for the idle reaper.
    limiter: Arc<ArcSwapOption<http::limit::Limiter>>,
    /// Wakes the idle reaper to take a new `session_idle_timeout` at once.
    reaper: Arc<tokio::sync::Notify>,
    /// The configuration in force; settings that need a restart keep the
    /// values the process started with.
    running: std::sync::Mutex<Config>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    stop: CancellationToken,
    /// Stops the MCP listener only (a child of `stop`): at shutdown it is
    /// cancelled before the backends stop, so that no request starts on a
    /// backend that is going away.
    listening: CancellationToken,
    server_task: JoinHandle<()>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A non-loopback address without `[auth]`: anyone who reaches the port would
    /// call every backend with the gateway's credentials.
    #[error(
        "refusing to serve {addr} without authentication: configure [auth] issuers, or set [auth] allow_unauthenticated = true"
    )]
    Unauthenticated {
        /// The address.
        addr: SocketAddr,
    },
    /// `[cluster] redis` could not be used.
    #[error("{0}")]
    Store(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        cause: std::io::Error,
    },
}

impl Gateway {
    /// Binds `config.server.listen` and starts serving.
    ///
    /// Errors: [`StartError::Bind`] when the address is taken or not allowed.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        let addr = config.server.listen;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|cause| StartError::Bind { addr, cause })?;
        Gateway::start_on(config, listener).await
    }

    /// Starts serving on an already bound listener (tests bind 127.0.0.1:0).
    pub async fn start_on(config: Config, listener: TcpListener) -> Result<Gateway, StartError> {
        let local_addr = listener.local_addr().map_err(|cause| StartError::Bind {
            addr: config.server.listen,
            cause,
        })?;
        if !local_addr.ip().is_loopback() && config.auth.is_none() {
            return Err(StartError::Unauthenticated { addr: local_addr });
        }
        let stop = CancellationToken::new();
        let auth = config
            .auth
            .as_ref()
            .and_then(|a| {
                Authenticator::new(a, &config.policy, &config.server.path, &config.endpoints)
            })
            .map(|a| AuthHandle::start(a, &stop));
        let server = Arc::new(config.server.clone());
        let live_server = Arc::new(ArcSwap::new(server.clone()));
        let metrics = Arc::new(Metrics::new());
        metrics.config_loaded(server.max_sessions);
        let sealer = Arc::new(sealer_for(&config.cluster));
        let sessions: Arc<dyn SessionStore> = Arc::new(MemoryStore::new(
            server.max_sessions,
            config.cluster.session_max_lifetime,
        ));
        sessions.set_limits(server.max_sessions, server.sessions_per_client());
        let shared = shared_store(&config, &metrics, &stop).await?;
        let catalog = Arc::new(Catalog::new(&config, sealer.clone()));
        let (refresh_tx, refresh_rx) = tokio::sync::mpsc::unbounded_channel();
        let relay = Relay::new(
            catalog.clone(),
            sessions.clone(),
            refresh_tx,
            metrics.clone(),
            shared.as_ref().map(|(store, _)| store.clone()),
        );
        let supervisor = Supervisor::new(
            live_server.clone(),
            catalog.clone(),
            sessions.clone(),
            relay.clone(),
            metrics.clone(),
            shared.as_ref().map(|(store, _)| store.clone()),
            sealer.clone(),
        );
        supervisor.start(refresh_rx);
        if let Some((_, events)) = shared {
            tokio::spawn(supervisor::follow_cluster(supervisor.clone(), events));
        }
        let dispatch = Dispatch::new(
            server.input_required_timeout,
            catalog.clone(),
            supervisor.clone(),
            relay.clone(),
            sealer.clone(),
            &metrics,
        );
        let limiter = server
            .rate_limit
            .and_then(http::limit::Limiter::new)
            .map(Arc::new);
        let auth_now = auth.as_ref().map(|h| h.current());
        let limit_log: Arc<http::admission::LimitLog> = Arc::default();
        let state = AppState {
            server: server.clone(),
            routes: Arc::new(http::Routes::new(
                &server.path,
                &config.endpoints,
                auth_now.as_deref(),
            )),
            sessions: sessions.clone(),
            catalog: catalog.clone(),
            dispatch,
            relay,
            supervisor: supervisor.clone(),
            metrics: metrics.clone(),
            sealer,
            limiter: limiter.clone(),
            limit_log: limit_log.clone(),
            proxies: Arc::new(http::client::TrustedProxies::new(&server.trusted_proxies)),
            origins: Arc::new(OriginPolicy::new(
                local_addr,
                &server.allowed_origins,
                &server.allowed_hosts,
            )),
            auth: auth_now,
        };
        if supervisor.shared().is_some() {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            supervisor.forward_owner_calls(tx);
            tokio::spawn(http::owner::run_handed(state.clone(), rx));
        }
        let face = LiveApp::new(http::app(state.clone()));
        let limiter = Arc::new(ArcSwapOption::new(limiter));
        let header_timeout = {
            let live = live_server.clone();
            move || live.load().header_read_timeout
        };
        let listening = stop.child_token();
        let server_task = tokio::spawn(http::serve::serve(
            listener,
            face.clone(),
            header_timeout.clone(),
            listening.clone(),
        ));
        let reaper = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(reap_idle(
            supervisor.clone(),
            Reaping {
                catalog: catalog.clone(),
                server: live_server.clone(),
                limiter: limiter.clone(),
                limit_log,
                wake: reaper.clone(),
            },
            stop.clone(),
        ));
        let (metrics_addr, metrics_face) = match server.metrics_listen {
            Some(addr) => {
                let app = LiveApp::new(metrics_app(
                    &server,
                    &metrics,
                    &sessions,
                    &supervisor,
                    &catalog,
                ));
                let bound = serve_metrics(addr, app.clone(), header_timeout, stop.clone()).await;
                (bound, bound.map(|_| app))
            }
            None => (None, None),
        };
        tracing::info!(addr = %local_addr, path = %config.server.path, backends = config.backends.len(), "mcpgate listening");
        Ok(Gateway {
            auth,
            local_addr,
            metrics_addr,
            sessions,
            supervisor,
            catalog,
            metrics,
            server: live_server,
            face,
            state: std::sync::Mutex::new(state),
            metrics_face,
            limiter,
            reaper,
            running: std::sync::Mutex::new(config),
            reloading: tokio::sync::Mutex::new(()),
            stop,
            listening,
            server_task,
        })
    }

    /// What a host with these token `claims` (`None`: unauthenticated) is shown,
    /// once the backends' catalogues have loaded (waits at most `wait`), as JSON
    /// `{"tools": [ITEM…], "prompts", "resources", "resourceTemplates", "hidden":
    /// {LIST: [NAME…]}}`: each ITEM as the list request returns it (2025-11-25,
    /// all pages) plus `"backend"`; `hidden` what the policy keeps from it
    /// (`mcpgate catalog`).
    ///
    /// `endpoint` names the `[endpoints.NAME]` to describe (needed when any is
    /// configured).
    ///
    /// Errors: claims without a string `iss` or `sub`; an endpoint not configured
    /// (or none named while endpoints are).
    pub async fn describe(
        &self,
        claims: Option<serde_json::Map<String, serde_json::Value>>,
        endpoint: Option<&str>,
        wait: Duration,
    ) -> Result<serde_json::Value, String> {
        let endpoint = self.catalog.endpoint(endpoint)?;
        let principal = claims.map(auth::Principal::from_claims).transpose()?;
        self.supervisor.wait_loaded(wait).await;
        Ok(catalog::describe(
            &self.catalog,
            &endpoint,
            principal.as_ref(),
        ))
    }

    /// [`Gateway::describe`] for the principal that bearer `token` authenticates
    /// as, verified as a host's token is (issuer, signature or introspection,
    /// audience, expiry, required scopes).
    ///
    /// Errors: no `[auth]` configured, or the token is refused (the reason).
    pub async fn describe_token(
        &self,
        token: &str,
        endpoint: Option<&str>,
        wait: Duration,
    ) -> Result<serde_json::Value, String> {
        let endpoint = self.catalog.endpoint(endpoint)?;
        let Some(handle) = &self.auth else {
            return Err("--token needs [auth]: without it every host is unauthenticated".into());
        };
        let header = format!("Bearer {}", token.trim());
        let principal = handle
            .current()
            .authenticate(Some(header.as_bytes()), None)
            .await
            .map_err(|e| format!("the token is refused: {e}"))?;
        self.supervisor.wait_loaded(wait).await;
        Ok(catalog::describe(
            &self.catalog,
            &endpoint,
            Some(&principal),
        ))
    }

    /// Number of host sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Graceful shutdown (drain). From the call on, `/readyz` answers 503, new
    /// sessions get 503 + `Retry-After`, and the listener keeps serving: streams
    /// in flight, and the requests of existing sessions (answers to sampling,
    /// cancels, calls). It waits for `server.drain_delay` and until no host
    /// request is in flight, at most `server.shutdown_grace` in all; calls still
    /// running then get a JSON-RPC error and are cancelled upstream. Then the
    /// listener stops (no new connection, idle keep-alive connections close,
    /// each connection's current exchange finishes), the requests that arrived
    /// before it stopped are answered, every session ends (its SSE streams
    /// close) and every backend is stopped (stdio children: close stdin →
    /// SIGTERM → SIGKILL; HTTP backends: `DELETE`). With a shared store (`[cluster] redis`) sessions are
    /// released instead: their records stay and the HTTP backends' sessions of
    /// host sessions get no `DELETE`, so other replicas go on serving them, and
    /// the listener stops as soon as `drain_delay` is over: the load balancer
    /// sends what comes next to another replica (a refused connection is
    /// retried), while the calls in flight here finish.
    pub async fn shutdown(self) {
        let start = tokio::time::Instant::now();
        self.supervisor.begin_shutdown();
        let (drain_delay, grace) = {
            let server = self.server.load();
            (server.drain_delay, server.shutdown_grace)
        };
        tracing::info!(
            drain_delay = ?drain_delay,
            grace = ?grace,
            in_flight = self.supervisor.calls_in_flight(),
            "draining: readiness is 503, new sessions are refused"
        );
        let grace_end = start + grace;
        tokio::time::sleep_until((start + drain_delay).min(grace_end)).await;
        if self.supervisor.shared().is_some() {
            // Other replicas serve these sessions from here on (answers to what
            // runs here reach it through the inbox): take no new request, so
            // that the calls in flight can finish instead of being joined by
            // new ones until the grace period ends.
            tracing::info!(
                in_flight = self.supervisor.calls_in_flight(),
                "drain delay over: the listener is closed, the calls in flight finish"
            );
            self.listening.cancel();
        }
        let settled = self.settle(grace_end).await;
        // No request may start on a backend that is stopping: one would fail
        // with "session ended" although the session lives on elsewhere. The
        // requests that arrived before the listener closed are answered first.
        self.listening.cancel();
        if settled {
            self.settle(grace_end).await;
        }
        self.supervisor.shutdown().await;
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server_task).await;
        tracing::info!("stopped");
    }

    /// Waits until no host call is in flight and no request is between its
    /// arrival and its response head (true), or until `grace_end` (false).
    async fn settle(&self, grace_end: tokio::time::Instant) -> bool {
        while self.supervisor.calls_in_flight() > 0 || self.face.answering() > 0 {
            if tokio::time::Instant::now() >= grace_end {
                tracing::warn!(
                    in_flight = self.supervisor.calls_in_flight(),
                    "shutdown grace period over; answering the calls in flight with an error"
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }
}

/// The sealer of session ids and cursors for `[cluster]`, with the startup line
/// that says what survives a restart.
fn sealer_for(cluster: &config::ClusterConfig) -> cluster::Sealer {
    let sealer = cluster::Sealer::new(&cluster.keys);
    if sealer.is_ephemeral() {
        tracing::info!(
            "no [cluster] session keys: session ids and cursors are sealed with a random key of this process; sessions do not survive a restart and cursors open only here"
        );
    } else {
        let kids: Vec<&str> = sealer.kids().collect();
        tracing::info!(
            sealing = sealer.sealing_kid(),
            keys = %kids.join(","),
            "session keys loaded: sessions survive a restart and open on every replica with the same keys"
        );
    }
    sealer
}

/// The shared session store of `[cluster] redis`, started (subscribed, first
/// heartbeat sent), and what it reports; `None` without one (token-only mode).
async fn shared_store(
    config: &Config,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Result<Option<cluster::Started>, StartError> {
    let store_metrics = cluster::StoreMetrics {
        up: metrics.cluster_redis_up.clone(),
        errors: metrics.cluster_store_errors.clone(),
    };
    let ttl = config.server.session_idle_timeout;
    let Some((store, events)) = cluster::SharedStore::new(&config.cluster, ttl, store_metrics)
        .map_err(StartError::Store)?
    else {
        return Ok(None);
    };
    metrics.register_cluster();
    store.start(stop.clone()).await;
    tracing::info!(
        replica = store.tag(),
        up = store.is_up(),
        "shared session store configured: sessions are shared with every replica using it"
    );
    Ok(Some((store, events)))
}

/// What the idle reaper reads at each round (a reload may change each).
struct Reaping {
    catalog: Arc<Catalog>,
    server: Arc<ArcSwap<ServerConfig>>,
    limiter: Arc<ArcSwapOption<http::limit::Limiter>>,
    /// The session limits' throttled lines: summaries owed are written.
    limit_log: Arc<http::admission::LimitLog>,
    /// Notified by a reload: the period is computed again.
    wake: Arc<tokio::sync::Notify>,
}

/// How often idle sessions and connections are looked for: a quarter of the
/// shortest idle limit (sessions', per-session connections', pooled ones' of
/// backends that may pool), within 100 ms to 30 s.
fn idle_period(catalog: &Catalog, session_idle_timeout: Duration) -> Duration {
    let pools = |b: &crate::catalog::BackendState| {
        (b.mode != crate::config::ConnectionMode::Shared).then_some(b.spec.config.pool_idle_timeout)
    };
    let shortest = catalog
        .backends()
        .active()
        .iter()
        .flat_map(|b| [b.spec.config.idle_timeout, pools(b)])
        .flatten()
        .fold(session_idle_timeout, Duration::min);
    (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

async fn reap_idle(supervisor: Arc<Supervisor>, reaping: Reaping, stop: CancellationToken) {
    loop {
        let idle = reaping.server.load().session_idle_timeout;
        tokio::select! {
            _ = tokio::time::sleep(idle_period(&reaping.catalog, idle)) => {
                supervisor.expire_idle().await;
                if let Some(l) = &*reaping.limiter.load() {
                    l.forget_idle();
                }
                reaping.limit_log.flush();
            }
            () = reaping.wake.notified() => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The metrics listener's application for `server` (`admin_endpoints`).
fn metrics_app(
    server: &ServerConfig,
    metrics: &Arc<Metrics>,
    sessions: &Arc<dyn SessionStore>,
    supervisor: &Arc<Supervisor>,
    catalog: &Arc<Catalog>,
) -> axum::Router {
    let admin = server.admin_endpoints.then(|| http::admin::Admin {
        supervisor: supervisor.clone(),
        catalog: catalog.clone(),
    });
    http::metrics_app(metrics.clone(), sessions.clone(), admin)
}

/// Serves `/metrics` on its own listener. A failure to bind is logged and the
/// gateway keeps serving without it.
async fn serve_metrics(
    addr: SocketAddr,
    app: Arc<LiveApp>,
    header_read_timeout: impl Fn() -> Duration + Send + 'static,
    stop: CancellationToken,
) -> Option<SocketAddr> {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, cause = %e, "cannot listen for /metrics; serving without metrics");
            return None;
        }
    };
    let local = listener.local_addr().ok();
    tokio::spawn(http::serve::serve(listener, app, header_read_timeout, stop));
    if let Some(addr) = local {
        tracing::info!(%addr, "metrics listening");
    }
    local
}
