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
        router.start();
        let state = AppState {
            router: router.clone(),
            origins: Arc::new(OriginPolicy::new(
                local_addr,
                &config.server.allowed_origins,
                &config.server.allowed_hosts,
            )),
            auth,
        };
        let app = http::app(state, &config.server.path, config.server.max_body_bytes);
        let shutdown = stop.clone();
        let server = tokio::spawn(async move {
            let serve =
                axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::error!(cause = %e, "HTTP server failed");
            }
        });
        tokio::spawn(reap_idle(router.clone(), stop.clone()));
        tracing::info!(addr = %local_addr, path = %config.server.path, backends = config.backends.len(), "mcpgate listening");
        Ok(Gateway {
            local_addr,
            router,
            stop,
            server,
        })
    }

    /// Stops accepting, ends every session and stops every backend.
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.router.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
    }
}

async fn reap_idle(router: Arc<Router>, stop: CancellationToken) {
    let period = (router.server.session_idle_timeout / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => router.expire_idle().await,
            _ = stop.cancelled() => return,
        }
    }
}
