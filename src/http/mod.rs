//! Server face: the Streamable HTTP endpoint (MCP 2025-11-25 basic/transports),
//! its guards (Origin/Host, CORS, body limit) and the health route.

mod accept;
pub mod admin;
pub mod admission;
mod auth;
pub(crate) mod batch;
mod body_timeout;
pub(crate) mod client;
mod error;
mod handed;
pub(crate) mod headers;
pub mod limit;
pub(crate) mod mcp;
pub(crate) mod modern;
pub(crate) mod owner;
mod resume;
mod routes;
pub mod serve;
mod session;
mod sse;
mod standalone;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router as AxumRouter;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::routing::get;
use tower::Layer;

use body_timeout::{BodyTimeout, BodyTimeoutLayer};
use tower_http::cors::{AllowHeaders, AllowOrigin, Cors, CorsLayer};
use tower_http::sensitive_headers::{SetSensitiveRequestHeaders, SetSensitiveRequestHeadersLayer};
use tower_http::set_header::{SetResponseHeader, SetResponseHeaderLayer};

pub use error::HttpError;
pub use routes::Routes;
pub use serve::LiveApp;

use crate::auth::Authenticator;
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
/// its own beyond its listener rules. One generation: a reload builds the next
/// one (new `[server]` settings, rules, routes and authenticator, the same
/// sessions, catalogue and supervisor) and swaps it in whole ([`LiveApp`]), so a
/// request sees one configuration from its first byte to its answer.
#[derive(Clone)]
pub struct AppState {
    /// `[server]` settings.
    pub server: Arc<ServerConfig>,
    /// Which path is which endpoint or metadata document.
    pub routes: Arc<Routes>,
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
    /// The log lines of the session limits (throttled).
    pub limit_log: Arc<admission::LimitLog>,
    /// Whose `X-Forwarded-For` names the client (`server.trusted_proxies`).
    pub proxies: Arc<client::TrustedProxies>,
    /// Bearer validation (`None`: the endpoint is open, see `[auth]`): the
    /// authenticator in force when this generation was built (its keys refresh
    /// in place).
    pub auth: Option<Arc<Authenticator>>,
}

/// The endpoint a request came in at: the `[endpoints.NAME]` name, `""` for the
/// one endpoint at `server.path` of a gateway without `[endpoints]`. Set as a
/// request extension by the routing table ([`Routes`]).
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

/// Builds one generation of the axum application from `state`: the MCP
/// endpoints and RFC 9728 metadata documents of `state.routes`, `/healthz` and
/// `/readyz`, with `state.server`'s body size limit (HTTP 413, answered from
/// `Content-Length` before any body is read), body read timeout (HTTP 408) and
/// CORS origins. Building it cannot fail (paths are looked up literally).
///
/// The tower-http layers wrap the router once, not each route (`Router::layer`
/// wraps every route in a boxed service of each layer, cloned with its future
/// boxed on every request).
pub fn app(state: AppState) -> Face {
    let server = state.server.clone();
    let policy = state.origins.clone();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin.to_str().is_ok_and(|o| policy.origin_allowed(o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        // Whatever an allowed origin's preflight asks for: a 2026-07-28 browser host
        // sends `Mcp-Method`, `Mcp-Name` and `Mcp-Param-{Name}` headers named by each
        // tool's schema, which no fixed list can name (CORS has no prefix match).
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
            header::WWW_AUTHENTICATE,
        ])
        .vary(Vec::<HeaderName>::new());
    let router = AxumRouter::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(routes::routed)
        .with_state(state.clone());
    tower::ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
        .layer(SetResponseHeaderLayer::appending(
            header::VARY,
            HeaderValue::from_static(VARY),
        ))
        .layer(cors)
        .layer(BodyTimeoutLayer::new(server.body_read_timeout))
        .layer(DefaultBodyLimit::max(server.max_body_bytes))
        .service(routes::Front::new(state, router))
}

/// The server face [`app`] builds: the MCP endpoints and the router
/// ([`routes::Front`]) inside (outermost first) the sensitive `Authorization`
/// marking, the `Vary` header, CORS, the body read timeout and the body size
/// limit.
pub type Face = SetSensitiveRequestHeaders<
    SetResponseHeader<
        Cors<BodyTimeout<<DefaultBodyLimit as Layer<routes::Front>>::Service>>,
        HeaderValue,
    >,
>;

/// `Vary` of every response, preflights included: what tower-http's CORS layer
/// sends by default (the request headers a CORS answer depends on, so that a
/// cache does not serve one origin's answer to another). Set as one constant
/// by a layer around CORS, which is told to send none: CORS builds its value
/// anew for every response (a joined `Vec` and a `HeaderValue` copy).
const VARY: &str = "origin, access-control-request-method, access-control-request-headers";

/// `GET /readyz`: 200 when ready, 503 + `Retry-After: 1` otherwise (every 503 the
/// gateway answers says when to ask again, RFC 9110 §10.2.3), with per-backend
/// state.
async fn readyz(
    axum::extract::State(st): axum::extract::State<AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (ready, body) = st.supervisor.readiness();
    if ready {
        return (axum::http::StatusCode::OK, axum::Json(body)).into_response();
    }
    let retry = [(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    )];
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        retry,
        axum::Json(body),
    )
        .into_response()
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
