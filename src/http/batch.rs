//! 2025-03-26 JSON-RPC batches (MCP 2025-03-26 basic/transports: servers MUST
//! accept them; removed in 2025-06-18): the batch's elements classified, its
//! length capped at [`MAX_BATCH_LEN`], its requests run [`BATCH_CONCURRENCY`] at
//! a time and answered together. The frame and session phases are `mcp.rs`'s.

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;

use super::mcp::{INITIALIZE_IN_BATCH, invalid};
use super::sse::json_response;
use super::{AppState, HttpError};
use crate::dispatch::{Call, Reply};
use crate::jsonrpc::{self, EnvelopeError, ErrorObject};
use crate::mcp::{Message, Method, Request as RpcRequest};
use crate::request::RequestContext;
use crate::session::{Host, Outbound, Session};

/// The most messages one batch may hold. The body limit alone (4 MiB by default)
/// would let some 100,000 minimal requests through, each holding a context, a
/// call and its answer until the whole batch is answered; no client needs that
/// many in one POST.
pub(crate) const MAX_BATCH_LEN: usize = 1000;

/// How many of a batch's requests run at a time; the others wait their turn.
/// Bounds what one POST holds in flight (each running request has its context,
/// call and upstream request) and how many requests one POST puts on a backend.
pub(crate) const BATCH_CONCURRENCY: usize = 16;

/// The elements of a batch, each classified.
///
/// Errors: 400 with -32700 (not JSON) or -32600 (empty, or more than
/// [`MAX_BATCH_LEN`] messages: the whole batch is refused, none of it run).
pub(crate) fn parse(body: &[u8]) -> Result<Vec<Result<Message, EnvelopeError>>, HttpError> {
    let items: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| HttpError::envelope(&EnvelopeError::Parse(e.to_string())))?;
    if items.is_empty() {
        return Err(invalid("an empty batch is not a request"));
    }
    if items.len() > MAX_BATCH_LEN {
        return Err(HttpError::envelope(&EnvelopeError::Invalid {
            id: None,
            reason: format!(
                "a batch holds at most {MAX_BATCH_LEN} messages; this one has {}",
                items.len()
            )
            .into(),
        }));
    }
    Ok(items.into_iter().map(jsonrpc::classify_raw).collect())
}

/// A JSON-RPC batch: only for sessions that negotiated 2025-03-26, where the spec
/// required receivers to accept them. Each element is handled like a single
/// message (each request with its own context), in order: notifications and
/// responses act at once — a `notifications/cancelled` for a request of the
/// batch drops it (no answer is due), for one in flight it cancels it as a
/// standalone one does. The requests then run [`BATCH_CONCURRENCY`] at a time
/// (JSON-RPC 2.0 §6: in any order, in parallel), and their answers come back
/// together, in the order of the requests. `initialize` may not be part of one;
/// a request id repeated within the batch is refused for the later request
/// (-32600: ids are unique within a session, MCP basic/index).
///
/// A request still waiting for its turn is not in flight yet: a cancel in
/// another POST does not find it.
pub(super) async fn serve(
    st: &AppState,
    session: &Arc<Session>,
    items: Vec<Result<Message, EnvelopeError>>,
) -> Response {
    use futures_util::StreamExt;
    let host = Host::Legacy(session.clone());
    // Answers known now and requests to run, each with its place in the batch.
    let mut ready: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut runs: Vec<(usize, RpcRequest)> = Vec::new();
    let mut ids = HashSet::new();
    for (at, item) in items.into_iter().enumerate() {
        let msg = match item {
            Ok(m) => m,
            Err(e) => {
                ready.push((at, jsonrpc::error_bytes(e.id(), &e.to_error_object())));
                continue;
            }
        };
        match msg {
            Message::Request(req) if req.method == Method::Initialize => {
                let e = ErrorObject::new(jsonrpc::INVALID_REQUEST, INITIALIZE_IN_BATCH);
                ready.push((at, jsonrpc::error_bytes(Some(&req.id), &e)));
            }
            Message::Request(req) if !ids.insert(req.id.clone()) => {
                let e = ErrorObject::new(
                    jsonrpc::INVALID_REQUEST,
                    format!(
                        "request id {} is repeated in this batch: only the first request with it is run",
                        req.id
                    ),
                );
                ready.push((at, jsonrpc::error_bytes(Some(&req.id), &e)));
            }
            Message::Request(req) => runs.push((at, req)),
            Message::Notification(n) => {
                let cancelled = (n.method == Method::Cancelled)
                    .then(|| n.params.as_ref()?.get("requestId"))
                    .flatten()
                    .and_then(|v| runs.iter().position(|(_, r)| r.id.matches_value(v)));
                match cancelled {
                    Some(i) => drop(runs.remove(i)),
                    None => st.relay.handle_notification(session, &n),
                }
            }
            Message::Response(r) => st.relay.handle_response(session, r),
        }
    }
    let run = |(at, req): (usize, RpcRequest)| {
        let host = &host;
        async move {
            let mut ctx = RequestContext::new(&st.metrics);
            ctx.set_request(&req.method);
            ctx.set_rpc_id(&req.id);
            ctx.set_session(session.log_id());
            ctx.set_revision(session.version());
            let mut call = match st.dispatch.handle(ctx, host, req).await {
                Reply::Now(b) => return vec![(at, b.to_vec())],
                Reply::Stream(rx) => Call::from(rx),
                Reply::Call(call) => call,
            };
            // A cancelled call ends without a final message: no answer is due.
            let mut finals = Vec::new();
            while let Some(m) = call.recv().await {
                if let Outbound::Final(b) = m {
                    finals.push((at, b.to_bytes().to_vec()));
                }
            }
            finals
        }
    };
    let ran: Vec<Vec<(usize, Vec<u8>)>> = futures_util::stream::iter(runs)
        .map(run)
        .buffer_unordered(BATCH_CONCURRENCY)
        .collect()
        .await;
    let mut answers = ready;
    answers.extend(ran.into_iter().flatten());
    answers.sort_by_key(|(at, _)| *at);
    let answers: Vec<Vec<u8>> = answers.into_iter().map(|(_, a)| a).collect();
    if answers.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    let mut out =
        Vec::with_capacity(answers.iter().map(Vec::len).sum::<usize>() + answers.len() + 2);
    out.push(b'[');
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(a);
    }
    out.push(b']');
    json_response(Bytes::from(out))
}
