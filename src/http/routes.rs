//! Which path is what: the MCP endpoints (`server.path`, or each
//! `[endpoints.NAME] path` instead) and the RFC 9728 metadata documents, as one
//! table per generation of the server face (`super::app`), so a reload adds,
//! removes and moves endpoints by swapping the generation.
//!
//! Paths are matched literally, byte for byte against the request target's
//! path (no query): no pattern syntax, so a configured path is never read as a
//! parameter and building the table cannot fail. [`Front`] looks the MCP
//! endpoints up before axum's router (a request to one skips the router's
//! matching, its catch-all fallback and the boxed handler); everything else,
//! `/healthz`, `/readyz`, the metadata documents and 404, goes to the router,
//! whose fallback ([`routed`]) serves the documents.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router as AxumRouter;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use foldhash::{HashMap, HashMapExt};

use super::auth::Document;
use super::{AppState, Endpoint};
use crate::auth::Authenticator;
use crate::config::EndpointConfig;

/// The paths of one generation of the server face.
#[derive(Debug, Default)]
pub struct Routes {
    /// MCP endpoint path → its endpoint.
    mcp: HashMap<Box<str>, Endpoint>,
    /// Metadata document path → which document.
    documents: HashMap<Box<str>, Document>,
}

impl Routes {
    /// The table for these settings: the endpoint at `server_path` when
    /// `endpoints` is empty, else one per endpoint at its path without the
    /// trailing `/`; `auth`'s metadata documents (none without `[auth]`).
    pub fn new(
        server_path: &str,
        endpoints: &BTreeMap<String, EndpointConfig>,
        auth: Option<&Authenticator>,
    ) -> Routes {
        let mut mcp = HashMap::new();
        if endpoints.is_empty() {
            mcp.insert(server_path.into(), Endpoint(Arc::from("")));
        }
        for (name, e) in endpoints {
            let path = match e.path.trim_end_matches('/') {
                "" => "/",
                p => p,
            };
            mcp.insert(path.into(), Endpoint(Arc::from(name.as_str())));
        }
        let documents = auth
            .map(super::auth::documents)
            .unwrap_or_default()
            .into_iter()
            .map(|(path, d)| (path.into_boxed_str(), d))
            .collect();
        Routes { mcp, documents }
    }

    /// Each endpoint's name (`""`: the one at `server.path`) and path.
    pub fn endpoints(&self) -> BTreeMap<&str, &str> {
        self.mcp.iter().map(|(p, e)| (&*e.0, &**p)).collect()
    }
}

/// The innermost service of the server face: a request whose path is an MCP
/// endpoint goes to its handler at once, every other request to `router`. The
/// router's own paths (`/healthz`, `/readyz`; no endpoint may be configured
/// there) stay the router's.
#[derive(Clone)]
pub struct Front {
    state: Arc<AppState>,
    router: AxumRouter,
}

impl Front {
    /// `router` (with its routes and fallback) behind the MCP endpoints of
    /// `state.routes`.
    pub fn new(state: AppState, router: AxumRouter) -> Front {
        Front {
            state: Arc::new(state),
            router,
        }
    }
}

/// The answer of [`Front`]: an MCP endpoint's handler or the router's.
pub enum FrontFuture {
    /// An MCP endpoint's handler.
    Mcp(Pin<Box<dyn Future<Output = Response> + Send>>),
    /// Everything else (boxed: axum's route future is ~320 bytes, and every
    /// layer around [`Front`] holds this one).
    Router(Box<RouteFuture<Infallible>>),
}

impl Future for FrontFuture {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            FrontFuture::Mcp(f) => f.as_mut().poll(cx).map(Ok),
            FrontFuture::Router(f) => Pin::new(&mut **f).poll(cx),
        }
    }
}

impl<B> tower::Service<axum::http::Request<B>> for Front
where
    B: HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = FrontFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> FrontFuture {
        let path = req.uri().path();
        if let Some(endpoint) = self.state.routes.mcp.get(path)
            && !RESERVED.contains(&path)
        {
            let endpoint = endpoint.clone();
            let st = AppState::clone(&self.state);
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(endpoint);
            return FrontFuture::Mcp(Box::pin(endpoint_request(st, req)));
        }
        FrontFuture::Router(Box::new(tower::Service::call(&mut self.router, req)))
    }
}

/// The router's own paths.
const RESERVED: [&str; 2] = ["/healthz", "/readyz"];

/// A request to an MCP endpoint (`POST`, `GET`, `DELETE`; 405 with `Allow`
/// and a JSON-RPC error body otherwise), answered as axum's router answers a top-level route:
/// `Content-Length` from a body of known size, no body for `HEAD`.
async fn endpoint_request(st: AppState, req: Request) -> Response {
    let head = req.method() == Method::HEAD;
    let mut res = match *req.method() {
        Method::POST => super::mcp::post(State(st), req).await,
        Method::GET => super::session::get(State(st), req).await,
        Method::DELETE => super::session::delete(State(st), req).await,
        _ => endpoint_not_allowed(&st, &req),
    };
    if !res.headers().contains_key(header::CONTENT_LENGTH)
        && let Some(n) = res.body().size_hint().exact()
    {
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    if head {
        *res.body_mut() = Body::empty();
    }
    res
}

/// The fallback of the router behind [`Front`]: a metadata document (`GET`,
/// `HEAD`), or 404.
pub(super) async fn routed(State(st): State<AppState>, req: Request) -> Response {
    let path = req.uri().path();
    if let Some(which) = st.routes.documents.get(path) {
        return match *req.method() {
            Method::GET | Method::HEAD => super::auth::document(&st, which).into_response(),
            _ => not_allowed("GET,HEAD"),
        };
    }
    StatusCode::NOT_FOUND.into_response()
}

/// The methods an MCP endpoint serves (MCP 2025-11-25 basic/transports), as
/// `Allow` names them.
const MCP_METHODS: &str = "GET, POST, DELETE";

/// 405 for any other method at an MCP endpoint: `Allow` (RFC 9110 §15.5.6) and
/// a JSON-RPC error body without an id, as every transport refusal has, e.g.
/// `Method Not Allowed: PUT; this endpoint serves GET, POST, DELETE`; counted
/// and logged as a `method_not_allowed` rejection.
fn endpoint_not_allowed(st: &AppState, req: &Request) -> Response {
    let mut ctx = super::accept::context(st, req);
    ctx.set_http_method("other");
    let method = crate::jsonrpc::clip(req.method().as_str()).into_owned();
    let e = super::HttpError::new(
        crate::request::Rejection::MethodNotAllowed,
        StatusCode::METHOD_NOT_ALLOWED,
        crate::jsonrpc::TRANSPORT_ERROR,
        format!("Method Not Allowed: {method}; this endpoint serves {MCP_METHODS}"),
    )
    .with_header(header::ALLOW, HeaderValue::from_static(MCP_METHODS));
    // A body left unread makes the connection unusable (as in `accept.rs`).
    let e = if req.body().size_hint().exact() == Some(0) {
        e
    } else {
        e.with_header(header::CONNECTION, HeaderValue::from_static("close"))
    };
    super::session::reject(ctx, e)
}

/// 405 naming the methods the path serves (RFC 9110 §15.5.6).
fn not_allowed(allow: &'static str) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, HeaderValue::from_static(allow))],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(path: &str) -> EndpointConfig {
        EndpointConfig {
            path: path.into(),
            backends: None,
            tools: None,
            exclude_tools: Vec::new(),
            scopes: Vec::new(),
            resource: None,
        }
    }

    #[test]
    fn paths_are_literal_and_endpoints_replace_server_path() {
        let one = Routes::new("/mcp/{x}", &BTreeMap::new(), None);
        assert_eq!(one.endpoints(), BTreeMap::from([("", "/mcp/{x}")]));
        assert!(one.mcp.contains_key("/mcp/{x}") && !one.mcp.contains_key("/mcp/a"));

        let named = BTreeMap::from([
            ("eng".to_string(), endpoint("/mcp/eng/")),
            ("root".to_string(), endpoint("/")),
        ]);
        let two = Routes::new("/mcp", &named, None);
        assert_eq!(
            two.endpoints(),
            BTreeMap::from([("eng", "/mcp/eng"), ("root", "/")])
        );
        assert!(!two.mcp.contains_key("/mcp"), "server.path is not served");
        assert!(two.documents.is_empty(), "no [auth], no documents");
    }
}
