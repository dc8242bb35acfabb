//! Server face: the Streamable HTTP endpoint (MCP 2025-11-25 basic/transports),
//! its guards (Origin/Host, CORS, body limit) and the health route.

mod accept;
pub mod admin;
mod auth;
pub(crate) mod client;
mod error;
pub(crate) mod headers;
pub mod limit;
pub(crate) mod mcp;
mod modern;
mod resume;
pub mod serve;
mod session;
mod sse;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router as AxumRouter;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::routing::get;
use tower::Service;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

pub use error::HttpError;

use crate::auth::AuthHandle;
use crate::catalog::Catalog;
use crate::cluster::Sealer;
use crate::config::ServerConfig;
use crate::dispatch::Dispatch;
use crate::metrics::Metrics;
use crate::relay::Relay;
use crate::session::SessionStore;
use crate::streamable_http::{is_loopback_name, is_loopback_origin, strip_port};
use crate::supervisor::Supervisor;

/// The parts the HTTP handlers use, each named: the server face owns no state of
/// its own beyond its listener rules.
#[derive(Clone)]
pub struct AppState {
    /// `[server]` settings.
    pub server: Arc<ServerConfig>,
    /// Host sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// The catalogue (authorization views).
    pub catalog: Arc<Catalog>,
    /// Host requests → backends.
    pub dispatch: Arc<Dispatch>,
    /// Host notifications and answers → backends.
    pub relay: Arc<Relay>,
    /// Backend and session lifetimes (readiness, session end).
    pub supervisor: Arc<Supervisor>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Seals and opens session ids (`[cluster]` keys).
    pub sealer: Arc<Sealer>,
    /// Origin and Host rules.
    pub origins: Arc<OriginPolicy>,
    /// Per-client rate limit, when configured.
    pub limiter: Option<Arc<limit::Limiter>>,
    /// Whose `X-Forwarded-For` names the client (`server.trusted_proxies`).
    pub proxies: Arc<client::TrustedProxies>,
    /// Bearer validation (`None`: the endpoint is open, see `[auth]`).
    pub auth: Option<Arc<AuthHandle>>,
}

/// The endpoint a request came in at: the `[endpoints.NAME]` name, `""` for the
/// one endpoint at `server.path` of a gateway without `[endpoints]`. Set on each
/// endpoint's route as a request extension.
#[derive(Debug, Clone)]
pub struct Endpoint(pub Arc<str>);

/// Which browser origins and Host headers are accepted (DNS-rebinding guard,
/// MCP 2025-11-25 transports "Security Warning": an invalid Origin gets 403).
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    allowed: Vec<String>,
    any: bool,
    loopback_bind: bool,
    hosts: Vec<String>,
}

impl OriginPolicy {
    /// Rules for a server listening on `listen` with the configured lists.
    pub fn new(listen: SocketAddr, allowed_origins: &[String], allowed_hosts: &[String]) -> Self {
        OriginPolicy {
            any: allowed_origins.iter().any(|o| o == "*"),
            allowed: allowed_origins
                .iter()
                .map(|o| o.to_ascii_lowercase())
                .collect(),
            loopback_bind: listen.ip().is_loopback(),
            hosts: allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a browser `Origin` may use the endpoint: configured origins, or any
    /// loopback origin when the gateway itself listens on loopback.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let origin = lower(origin);
        self.any
            || self.allowed.iter().any(|a| *a == origin)
            || (self.loopback_bind && is_loopback_origin(&origin))
    }

    /// Whether a `Host` header is acceptable. On a loopback bind only loopback
    /// names (and configured hosts) are, so a rebound DNS name is refused.
    pub fn host_allowed(&self, host: &str) -> bool {
        if !self.loopback_bind {
            return true;
        }
        let host = lower(host);
        let name = strip_port(&host);
        is_loopback_name(name) || self.hosts.iter().any(|h| *h == host || h == name)
    }
}

/// `s` in lower case, copied only if it has upper-case letters.
fn lower(s: &str) -> std::borrow::Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        s.to_ascii_lowercase().into()
    } else {
        s.into()
    }
}

/// Builds the axum application: the MCP endpoint at `server.path` (or, with
/// `[endpoints]`, one at each endpoint's path instead), the RFC 9728 metadata
/// documents, `/healthz` and `/readyz`.
///
/// `server` gives the endpoint path, the body size limit (HTTP 413, answered
/// from `Content-Length` before any body is read) and the body read timeout
/// (HTTP 408).
pub fn app(
    state: AppState,
    server: &ServerConfig,
    endpoints: &std::collections::BTreeMap<String, crate::config::EndpointConfig>,
) -> impl Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future: Send + 'static,
> + Clone
+ Send
+ 'static {
    let policy = state.origins.clone();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin.to_str().is_ok_and(|o| policy.origin_allowed(o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::ACCEPT,
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
            header::WWW_AUTHENTICATE,
        ]);
    let metadata = auth::metadata_routes(state.auth.as_deref());
    let mut routes = AxumRouter::new();
    if endpoints.is_empty() {
        routes = routes.route(&server.path, mcp_route(""));
    }
    for (name, e) in endpoints {
        let path = match e.path.trim_end_matches('/') {
            "" => "/",
            p => p,
        };
        routes = routes.route(path, mcp_route(name));
    }
    let router = routes
        .merge(metadata)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state);
    // Around the router, not `Router::layer`: that wraps every route in a boxed
    // service of each layer, cloned (with its future boxed) for every request.
    tower::ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
        .layer(cors)
        .layer(RequestBodyTimeoutLayer::new(server.body_read_timeout))
        .layer(DefaultBodyLimit::max(server.max_body_bytes))
        .service(router)
}

/// `GET`, `POST` and `DELETE` of the MCP endpoint `name` (`""`: `server.path`),
/// each request carrying its [`Endpoint`].
fn mcp_route(name: &str) -> axum::routing::MethodRouter<AppState> {
    let here = Endpoint(Arc::from(name));
    let at = move |mut req: axum::extract::Request| {
        req.extensions_mut().insert(here.clone());
        req
    };
    let (get_at, post_at, delete_at) = (at.clone(), at.clone(), at);
    axum::routing::MethodRouter::new()
        .get(move |st, req| session::get(st, get_at(req)))
        .post(move |st, req| mcp::post(st, post_at(req)))
        .delete(move |st, req| session::delete(st, delete_at(req)))
}

/// `GET /readyz`: 200 when ready, 503 otherwise, with per-backend state.
async fn readyz(
    axum::extract::State(st): axum::extract::State<AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (ready, body) = st.supervisor.readiness();
    let status = if ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// The metrics application (its own listener): `GET /metrics` in the Prometheus
/// text format, and the admin endpoints ([`admin`]) when `admin` is given.
pub fn metrics_app(
    metrics: Arc<Metrics>,
    sessions: Arc<dyn SessionStore>,
    admin: Option<admin::Admin>,
) -> AxumRouter {
    let app = AxumRouter::new().route(
        "/metrics",
        get(move || {
            let (metrics, sessions) = (metrics.clone(), sessions.clone());
            async move {
                metrics.sessions_active.set(sessions.len() as i64);
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    metrics.render(),
                )
            }
        }),
    );
    match admin {
        Some(a) => app.merge(admin::routes(a)),
        None => app,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_policy() {
        let p = OriginPolicy::new(
            "127.0.0.1:8080".parse().unwrap(),
            &["https://app.allowed.test".into()],
            &[],
        );
        assert!(p.origin_allowed("http://localhost:6274"));
        assert!(p.origin_allowed("http://127.0.0.1:3000"));
        assert!(p.origin_allowed("https://app.allowed.test"));
        assert!(!p.origin_allowed("https://evil.example.test"));
        assert!(!p.origin_allowed("null"));
        assert!(p.host_allowed("localhost:8080"));
        assert!(p.host_allowed("127.0.0.1:8080"));
        assert!(p.host_allowed("[::1]:8080"));
        assert!(!p.host_allowed("attacker.example:8080"));
    }

    #[test]
    fn public_bind_checks_only_configured_origins() {
        let p = OriginPolicy::new("0.0.0.0:8080".parse().unwrap(), &[], &[]);
        assert!(!p.origin_allowed("http://localhost:6274"));
        assert!(p.host_allowed("gw.example.test"));
    }
}
