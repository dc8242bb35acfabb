//! The read-only admin endpoints, served on the metrics listener only when
//! `[server] admin_endpoints = true` (never on the MCP listener):
//!
//! - `GET /admin/backends`: every backend's state, connection mode, list sizes,
//!   restarts and last error ([`Supervisor::backends_report`]).
//! - `GET /admin/catalog[?claims=JSON][&endpoint=NAME]`: what a principal with those
//!   token claims (`iss` and `sub` required; `scope` as in a token) is shown at that
//!   `[endpoints.NAME]` (required when endpoints are configured), in the shape
//!   `mcpgate catalog --json` prints; without `claims`, an unauthenticated host.
//!   Bad claims or endpoint: 400 `{"error": "..."}`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router as AxumRouter;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::catalog::{Catalog, describe};
use crate::supervisor::Supervisor;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct Admin {
    /// Backend states.
    pub supervisor: Arc<Supervisor>,
    /// The catalogue and its per-principal views.
    pub catalog: Arc<Catalog>,
}

/// The admin routes, to merge into the metrics application.
pub fn routes(admin: Admin) -> AxumRouter {
    AxumRouter::new()
        .route("/admin/backends", get(backends))
        .route("/admin/catalog", get(catalog))
        .with_state(admin)
}

async fn backends(State(a): State<Admin>) -> Json<Value> {
    Json(a.supervisor.backends_report())
}

async fn catalog(State(a): State<Admin>, Query(q): Query<HashMap<String, String>>) -> Response {
    let asked = q
        .get("claims")
        .map(|c| principal(c))
        .transpose()
        .and_then(|p| {
            let endpoint = a.catalog.endpoint(q.get("endpoint").map(String::as_str))?;
            Ok((p, endpoint))
        });
    match asked {
        Ok((p, endpoint)) => Json(describe(&a.catalog, &endpoint, p.as_ref())).into_response(),
        Err(e) => {
            tracing::info!(cause = %e, "admin: /admin/catalog refused its query");
            (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response()
        }
    }
}

/// The principal a token with `claims` (a JSON object) would authenticate as.
fn principal(claims: &str) -> Result<Principal, String> {
    let claims: Map<String, Value> =
        serde_json::from_str(claims).map_err(|e| format!("claims: not a JSON object: {e}"))?;
    Principal::from_claims(claims).map_err(|e| format!("claims: {e}"))
}
