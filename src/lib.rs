//! mcpgate: a Model Context Protocol gateway.
//!
//! Hosts talk MCP Streamable HTTP to one endpoint ([`http`]); the [`router`] maps
//! their namespaced names onto [`backend`] connections (stdio children and remote
//! Streamable HTTP servers). [`Gateway::start`] wires everything for `main` and tests.

pub mod auth;
pub mod backend;
pub mod config;
pub mod demo;
pub mod http;
pub mod jsonrpc;
pub mod metrics;
pub mod protocol;
pub mod router;
pub mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::http::{AppState, OriginPolicy};
use crate::router::Router;
use crate::session::MemoryStore;

/// A running gateway.
pub struct Gateway {
    /// The address the MCP endpoint listens on.
    pub local_addr: SocketAddr,
    /// The address of the `/metrics` listener, if it is running.
    pub metrics_addr: Option<SocketAddr>,
    /// The router (for tests and embedding).
    pub router: Arc<Router>,
    stop: CancellationToken,
    server: JoinHandle<()>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A non-loopback address without `[auth]` (DESIGN decision 10).
    #[error(
        "refusing to serve {addr} without authentication: configure [auth] issuers, or set [auth] allow_unauthenticated = true"
    )]
    Unauthenticated {
        /// The address.
        addr: SocketAddr,
    },
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
            .and_then(|a| Authenticator::new(a, &config.policy, &config.server.path));
        if let Some(a) = &auth {
            a.start(&stop);
        }
        let sessions = Arc::new(MemoryStore::new(config.server.max_sessions));
        let router = Router::new(&config, sessions);
        router.metrics.config_loaded(config.server.max_sessions);
        router.start();
        let limiter = config
            .server
            .rate_limit
            .and_then(|l| http::limit::Limiter::new(l, router.metrics.clone()))
            .map(Arc::new);
        let state = AppState {
            limiter: limiter.clone(),
            router: router.clone(),
            origins: Arc::new(OriginPolicy::new(
                local_addr,
                &config.server.allowed_origins,
                &config.server.allowed_hosts,
            )),
            auth,
        };
        let app = http::app(state, &config.server);
        let server = tokio::spawn(http::serve::serve(
            listener,
            app,
            config.server.header_read_timeout,
            stop.clone(),
        ));
        tokio::spawn(reap_idle(router.clone(), limiter, stop.clone()));
        let metrics_addr = match config.server.metrics_listen {
            Some(addr) => {
                serve_metrics(
                    addr,
                    router.clone(),
                    config.server.header_read_timeout,
                    stop.clone(),
                )
                .await
            }
            None => None,
        };
        tracing::info!(addr = %local_addr, path = %config.server.path, backends = config.backends.len(), "mcpgate listening");
        Ok(Gateway {
            local_addr,
            metrics_addr,
            router,
            stop,
            server,
        })
    }

    /// Applies the backends of a new configuration (hot reload); see
    /// [`router::reload`].
    pub async fn reload(&self, config: &Config) -> router::reload::ReloadReport {
        self.router.reload(config).await
    }

    /// Graceful shutdown: stop accepting connections (`/readyz` turns 503), let
    /// host requests in flight finish within `server.shutdown_grace`, then end
    /// every session (its SSE streams close) and stop every backend (stdio
    /// children: close stdin → SIGTERM → SIGKILL; HTTP backends: `DELETE`).
    pub async fn shutdown(self) {
        self.router.begin_shutdown();
        self.stop.cancel();
        let deadline = tokio::time::Instant::now() + self.router.server.shutdown_grace;
        loop {
            let busy = self.router.calls_in_flight();
            if busy == 0 {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    in_flight = busy,
                    "shutdown grace period over; abandoning requests in flight"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.router.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        tracing::info!("stopped");
    }
}

async fn reap_idle(
    router: Arc<Router>,
    limiter: Option<Arc<http::limit::Limiter>>,
    stop: CancellationToken,
) {
    let shortest = router
        .backends
        .active()
        .iter()
        .map(|b| b.spec.config.idle_timeout)
        .fold(router.server.session_idle_timeout, Duration::min);
    let period = (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                router.expire_idle().await;
                if let Some(l) = &limiter {
                    l.forget_idle();
                }
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// Serves `/metrics` on its own listener. A failure to bind is logged and the
/// gateway keeps serving without it.
async fn serve_metrics(
    addr: SocketAddr,
    router: Arc<Router>,
    header_read_timeout: Duration,
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
    let app = http::metrics_app(router);
    tokio::spawn(http::serve::serve(listener, app, header_read_timeout, stop));
    if let Some(addr) = local {
        tracing::info!(%addr, "metrics listening");
    }
    local
}
