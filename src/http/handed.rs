//! What a request handed to the replica owning its session's per-session
//! children (`owner.rs`) leaves in the audit and the metrics: the replica the
//! host sent it to writes the host's access line (with the backend and name
//! where it routes them itself) and counts it in `mcpgate_requests_total`,
//! its outcome read from the owner's response; the owner writes a line of its
//! own (`handed=true`, with the principal, client and endpoint the sender
//! sealed in the hand-over), counted only in the backend metrics it meets
//! there (`mcpgate_upstream_*`). `mcpgate_cluster_forwarded_total{kind="call"}`
//! counts the hand-over, on the sender.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use serde_json::Value;
use tokio::sync::mpsc;

use super::AppState;
use super::sse::{json_response, sse_response};
use crate::auth::PrincipalId;
use crate::catalog::BackendState;
use crate::mcp::{Method, Request as RpcRequest};
use crate::request::{Outcome, RequestContext};
use crate::session::{Session, StreamSlot};
use crate::streamable_http::{Attached, Frame};

/// Names what `req` is about on the access line of a request handed over
/// (`backend`: where it routes, when this replica knows).
pub(super) fn name_route(
    ctx: &mut RequestContext,
    backend: Option<&BackendState>,
    req: &RpcRequest,
) {
    ctx.set_forwarded();
    let params = req.params.as_ref();
    let at = |key: &str| params.and_then(|p| p.get(key)).and_then(Value::as_str);
    let target = match req.method {
        Method::ToolsCall | Method::PromptsGet => at("name"),
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            at("uri")
        }
        Method::TasksGet | Method::TasksResult | Method::TasksCancel => at("taskId"),
        _ => None,
    };
    let Some(b) = backend else {
        if let Some(target) = target {
            ctx.set_target(target);
        }
        return;
    };
    ctx.set_route(&b.spec.name, target);
    if req.method == Method::ToolsCall {
        ctx.set_tool_metrics(b.spec.config.tool_metrics);
        let arguments = params.and_then(|p| p.get("arguments"));
        let audit = &b.spec.config.audit;
        ctx.set_arguments(crate::request::audited_arguments(audit, arguments));
    }
}

/// The longest call timeout of the backends that run a child per session
/// for `session` (`None`: none does, so nothing of it is owner-bound).
pub(super) fn longest_call_timeout(st: &AppState, session: &Session) -> Option<Duration> {
    let backends = st.catalog.backends().snapshot();
    backends
        .iter()
        .filter(|b| !b.is_removed() && st.supervisor.is_owner_bound(b.index, session))
        .map(|b| b.spec.call_timeout())
        .max()
}

/// Answers the host with what the owner sends: JSON when the response is the
/// first thing within the window, else an SSE stream of the owner's stream.
/// The request ends with the outcome the response says
/// ([`Outcome::of_answer`]; `routed`: this replica routed it to a backend),
/// when it passes; cancelled if none comes or the host goes first.
pub(super) async fn respond(
    st: &AppState,
    ctx: RequestContext,
    session: &Session,
    slot: StreamSlot,
    mut attached: Attached,
    routed: bool,
) -> Response {
    let first = if attached.replay.is_empty() {
        match attached.live.as_mut() {
            Some(live) => tokio::time::timeout(st.server.json_response_window, live.recv())
                .await
                .ok()
                .flatten(),
            None => None,
        }
    } else {
        Some(attached.replay.remove(0))
    };
    match first {
        Some(f) if f.last => {
            finish(ctx, &f, routed);
            st.metrics.bytes_out.inc_by(f.data.len() as u64);
            return json_response(f.data);
        }
        Some(f) => attached.replay.insert(0, f),
        None => {}
    }
    if let Some(last) = attached.replay.iter().find(|f| f.last) {
        finish(ctx, last, routed);
    } else if let Some(live) = attached.live.take() {
        attached.live = Some(watch(live, ctx, routed));
    } else {
        ctx.finish(Outcome::Cancelled);
    }
    let prime = session.version().primes_streams();
    sse_response(slot, prime, attached, st.server.sse_keep_alive, &st.metrics)
}

/// Ends `ctx` with the outcome of the owner's last event `f`.
fn finish(mut ctx: RequestContext, f: &Frame, routed: bool) {
    let (outcome, code) = Outcome::of_answer(&f.data, routed);
    ctx.set_bytes_out(f.data.len());
    match code {
        Some(code) => ctx.finish_error(outcome, code),
        None => ctx.finish(outcome),
    }
}

/// `live`, passed on, ending `ctx` when its last event passes (dropped
/// before: cancelled).
fn watch(
    mut live: mpsc::Receiver<Frame>,
    ctx: RequestContext,
    routed: bool,
) -> mpsc::Receiver<Frame> {
    let (tx, rx) = mpsc::channel(live.max_capacity().max(1));
    tokio::spawn(async move {
        while let Some(f) = live.recv().await {
            let last = f.last.then(|| f.clone());
            if tx.send(f).await.is_err() {
                return;
            }
            if let Some(f) = last {
                return finish(ctx, &f, routed);
            }
        }
    });
    rx
}

/// Who sent a handed request, from where, to which endpoint (the sender's
/// `"a"` of the sealed call: `{"p": {"issuer", "subject"} | null, "c": IP |
/// null, "e": endpoint}`), for the owner's access line.
pub(super) fn handed_context(
    st: &AppState,
    request: &RpcRequest,
    audit: Option<&Value>,
    session: &Session,
) -> RequestContext {
    let field = |key: &str| audit.and_then(|a| a.get(key)).cloned();
    let principal = field("p").and_then(|p| serde_json::from_value::<PrincipalId>(p).ok());
    let client = field("c").and_then(|c| serde_json::from_value::<IpAddr>(c).ok());
    let endpoint: Arc<str> = field("e")
        .and_then(|e| e.as_str().map(Arc::from))
        .unwrap_or_else(|| Arc::from(""));
    let mut ctx = RequestContext::new(&st.metrics);
    ctx.set_handed((&request.method, &request.id), principal, client, endpoint);
    ctx.set_session(session.log_id());
    ctx.set_revision(session.version());
    ctx
}
