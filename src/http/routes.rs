//! Which path is what: the MCP endpoints (`server.path`, or each
//! `[endpoints.NAME] path` instead) and the RFC 9728 metadata documents, as one
//! table per generation of the server face (`super::app`), so a reload adds,
//! removes and moves endpoints by swapping the generation.
//!
//! Paths are matched literally, byte for byte against the request target's
//! path (no query): no pattern syntax, so a configured path is never read as a
//! parameter and building the table cannot fail. The router's own routes
//! (`/healthz`, `/readyz`) are looked up first; this table is its fallback, a
//! hash lookup where axum's route table used to hold these paths.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
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

/// The fallback of the server face: an MCP endpoint (`POST`, `GET`, `DELETE`;
/// 405 with `Allow` otherwise), a metadata document (`GET`), or 404.
pub(super) async fn routed(State(st): State<AppState>, mut req: Request) -> Response {
    let path = req.uri().path();
    if let Some(endpoint) = st.routes.mcp.get(path) {
        let endpoint = endpoint.clone();
        req.extensions_mut().insert(endpoint);
        return match *req.method() {
            Method::POST => super::mcp::post(State(st), req).await,
            Method::GET => super::session::get(State(st), req).await,
            Method::DELETE => super::session::delete(State(st), req).await,
            _ => not_allowed("GET,POST,DELETE"),
        };
    }
    if let Some(which) = st.routes.documents.get(path) {
        return match *req.method() {
            Method::GET | Method::HEAD => super::auth::document(&st, which).into_response(),
            _ => not_allowed("GET,HEAD"),
        };
    }
    StatusCode::NOT_FOUND.into_response()
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
