//! The HTTP side of authorization (MCP 2025-11-25 basic/authorization) besides
//! authentication itself (`accept.rs`): the RFC 9728 protected resource metadata
//! routes, and the binding of a session to the principal that created it.

use std::sync::Arc;

use axum::Json;
use serde_json::Value;

use super::{AppState, HttpError};
use crate::auth::metadata::WELL_KNOWN;
use crate::auth::{Authenticator, Principal};
use crate::jsonrpc;
use crate::mcp::Changed;
use crate::session::Session;

/// An RFC 9728 protected resource metadata document the gateway serves.
#[derive(Debug, Clone)]
pub(super) enum Document {
    /// The document of the single endpoint at `server.path`.
    Endpoint,
    /// The document of `[endpoints.NAME]`.
    Virtual(String),
    /// The one at the root of `/.well-known/oauth-protected-resource`.
    Root,
}

/// Where `auth`'s metadata documents are served: the path-inserted URL(s) of
/// each endpoint and the root one. Open (no token needed), GET only.
pub(super) fn documents(auth: &Authenticator) -> Vec<(String, Document)> {
    let m = &auth.metadata;
    let mut at = Vec::new();
    // A virtual endpoint's document wins a path it shares with the gateway's.
    let mut taken = std::collections::HashSet::new();
    for (name, e) in &m.endpoints {
        if taken.insert(e.path.clone()) {
            at.push((e.path.clone(), Document::Virtual(name.clone())));
        }
    }
    for path in &m.paths {
        if taken.insert(path.clone()) {
            at.push((path.clone(), Document::Endpoint));
        }
    }
    if m.root_document.is_some() && taken.insert(WELL_KNOWN.to_owned()) {
        at.push((WELL_KNOWN.to_owned(), Document::Root));
    }
    at
}

/// `GET` of a metadata document, from the authenticator of this generation.
pub(super) fn document(st: &AppState, which: &Document) -> Json<Value> {
    let Some(a) = &st.auth else {
        return Json(Value::Null);
    };
    let m = &a.metadata;
    Json(match which {
        Document::Endpoint => m.document.clone(),
        Document::Virtual(name) => m
            .endpoints
            .get(name)
            .map_or(Value::Null, |e| e.document.clone()),
        Document::Root => m.root_document.clone().unwrap_or(Value::Null),
    })
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
            // What this replica re-derived; another re-derives its own.
            let n = jsonrpc::notification_bytes(c.method().as_str(), None);
            session.announce_here(n.into());
        }
    }
    Ok(())
}
