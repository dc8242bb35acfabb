//! The HTTP plane of authorization (MCP 2025-11-25 basic/authorization): every
//! request to the MCP endpoint is authenticated after the Origin check and
//! before anything else; failures answer 401 / 403 / 400 with an RFC 6750
//! `WWW-Authenticate` challenge naming the RFC 9728 metadata URL. Also serves
//! that metadata, and binds sessions to the principal that created them.

use std::sync::Arc;

use axum::Json;
use axum::Router as AxumRouter;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{AppState, HttpError, headers};
use crate::auth::metadata::WELL_KNOWN;
use crate::auth::{AuthError, Authenticator, Principal};
use crate::jsonrpc;
use crate::session::Session;

/// Middleware on the MCP endpoint: Origin check, then bearer validation; the
/// [`Principal`] goes into the request extensions. `Authorization` is removed
/// from the request either way, so nothing after this point can log or
/// forward it.
///
/// A refused request's body is read first (up to `server.max_body_bytes`, within
/// `server.body_read_timeout`): hyper closes a connection whose request body was
/// not read, and a host that sends its first request without a token (every
/// OAuth client does) has often reused that connection already for the retry.
pub async fn require(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let presented = req.headers_mut().remove(header::AUTHORIZATION);
    let Some(auth) = st.auth.clone() else {
        return next.run(req).await;
    };
    if let Err(e) = headers::check_origin(req.headers(), &st.origins) {
        return e.into_response();
    }
    let result = auth
        .authenticate(
            presented.as_ref().map(HeaderValue::as_bytes),
            req.uri().query(),
        )
        .await;
    match result {
        Ok(p) => {
            req.extensions_mut().insert(Arc::new(p));
            next.run(req).await
        }
        Err(e) => {
            tracing::debug!(cause = %e, method = %req.method(), "request not authenticated");
            let limit = st.router.server.max_body_bytes;
            let drained = axum::body::to_bytes(req.into_body(), limit).await.is_ok();
            let mut resp = rejection(&auth, &e);
            if !drained {
                // The unread rest of the body makes the connection unusable.
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            resp
        }
    }
}

/// The one place an [`AuthError`] becomes an HTTP answer.
pub fn rejection(auth: &Authenticator, e: &AuthError) -> Response {
    let (status, message) = match e {
        AuthError::Missing | AuthError::Invalid(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        AuthError::QueryToken => (
            StatusCode::BAD_REQUEST,
            "Bad Request: access tokens are accepted only in the Authorization header",
        ),
        AuthError::InsufficientScope(_) => (StatusCode::FORBIDDEN, "Forbidden: insufficient scope"),
    };
    let mut resp = HttpError::new(status, jsonrpc::TRANSPORT_ERROR, message).into_response();
    if let Ok(v) = HeaderValue::try_from(auth.metadata.challenge(e)) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// RFC 9728 metadata routes: the path-inserted URL(s) of the endpoint and the
/// root one. Open (no token needed), GET only.
pub fn metadata_routes(auth: Option<&Authenticator>) -> AxumRouter<AppState> {
    let mut r = AxumRouter::new();
    let Some(auth) = auth else { return r };
    let m = &auth.metadata;
    for path in &m.paths {
        let doc = m.document.clone();
        r = r.route(path, get(move || async move { Json(doc) }));
    }
    if let Some(doc) = m.root_document.clone() {
        r = r.route(WELL_KNOWN, get(move || async move { Json(doc) }));
    }
    r
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
    if session.principal != presented {
        return Err(HttpError::unknown_session());
    }
    let Some(p) = principal else { return Ok(()) };
    session.set_subject_token(Some(p.token().clone()));
    let key = st.router.view_key(Some(p));
    if session.set_view_key(key) {
        for method in [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ] {
            session.send_unrelated(jsonrpc::notification_bytes(method, None).into());
        }
    }
    Ok(())
}
