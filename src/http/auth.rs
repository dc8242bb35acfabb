//! The HTTP side of authorization (MCP 2025-11-25 basic/authorization) besides
//! authentication itself (`accept.rs`): the RFC 9728 protected resource metadata
//! routes, and the binding of a session to the principal that created it.

use std::sync::Arc;

use axum::Json;
use axum::Router as AxumRouter;
use axum::extract::State;
use axum::routing::get;
use serde_json::Value;

use super::{AppState, HttpError};
use crate::auth::metadata::WELL_KNOWN;
use crate::auth::{AuthHandle, Authenticator, Principal};
use crate::jsonrpc;
use crate::mcp::Changed;
use crate::session::Session;

/// RFC 9728 metadata routes: the path-inserted URL(s) of the endpoint and the
/// root one. Open (no token needed), GET only. The paths are those of the
/// authenticator at start; the documents are read from the one in force (a
/// reload of `[auth]` changes them).
pub fn metadata_routes(auth: Option<&AuthHandle>) -> AxumRouter<AppState> {
    let mut r = AxumRouter::new();
    let Some(handle) = auth else { return r };
    let m = &handle.current().metadata;
    // A virtual endpoint's document wins a path it shares with the gateway's.
    let mut taken = std::collections::HashSet::new();
    for (name, e) in &m.endpoints {
        if taken.insert(e.path.clone()) {
            let name = name.clone();
            r = r.route(
                &e.path,
                get(move |st: State<AppState>| virtual_document(st, name.clone())),
            );
        }
    }
    for path in &m.paths {
        if taken.insert(path.clone()) {
            r = r.route(path, get(endpoint_document));
        }
    }
    if m.root_document.is_some() && taken.insert(WELL_KNOWN.to_owned()) {
        r = r.route(WELL_KNOWN, get(root_document));
    }
    r
}

async fn endpoint_document(State(st): State<AppState>) -> Json<Value> {
    Json(current(&st).map_or(Value::Null, |a| a.metadata.document.clone()))
}

async fn virtual_document(State(st): State<AppState>, name: String) -> Json<Value> {
    Json(
        current(&st)
            .and_then(|a| a.metadata.endpoints.get(&name).map(|e| e.document.clone()))
            .unwrap_or(Value::Null),
    )
}

async fn root_document(State(st): State<AppState>) -> Json<Value> {
    Json(
        current(&st)
            .and_then(|a| a.metadata.root_document.clone())
            .unwrap_or(Value::Null),
    )
}

fn current(st: &AppState) -> Option<Arc<Authenticator>> {
    st.auth.as_ref().map(|h| h.current())
}

/// Checks that `principal` may use `session` (the one that created it: another
/// principal gets 404 as for an unknown session, MCP 2025-11-25 security best
/// practices, session hijacking), then records the request's token (for token
/// exchange) and re-derives the session's authorization view; when it changed
/// (new scopes), the host is told its lists changed.
pub fn bind(
    st: &AppState,
    session: &Session,
    principal: Option<&Arc<Principal>>,
) -> Result<(), HttpError> {
    let presented = principal.map(|p| p.id());
    if session.principal() != presented.as_ref() {
        return Err(HttpError::unknown_session());
    }
    let Some(p) = principal else { return Ok(()) };
    session.set_subject_token(Some(p.token().clone()));
    let key = st.catalog.view_key_at(session.endpoint(), Some(p));
    if session.set_view_key(key) {
        for c in Changed::ALL {
            session.send_unrelated(jsonrpc::notification_bytes(c.method().as_str(), None).into());
        }
    }
    Ok(())
}
