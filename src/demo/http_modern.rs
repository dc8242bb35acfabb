//! The demo's Streamable HTTP endpoint for 2026-07-28 ("modern", stateless)
//! requests (MCP 2026-07-28 basic/transports/streamable-http).
//!
//! A POST is modern when its body claims a protocol version in `params._meta`, or
//! when, without a claim, `MCP-Protocol-Version` names a modern revision ([`is_modern`]);
//! any `Mcp-Session-Id` is ignored and none is minted. The validation ladder answers
//! 400 (-32602 envelope, -32020 headers, -32022 revision) or 404 (-32601 method),
//! each error with the request's id. Each request is served on its own detached
//! session (no state survives it). The answer is JSON when the response comes
//! before anything else (its status by code: 400 for -32021, 404 for -32601), else
//! an SSE stream of the request's own notifications and its response, without
//! event ids; closing that stream cancels the request. A notification gets 202; a
//! POSTed response 400. GET and DELETE from a modern client get 405 `Allow: POST`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream;
use mcpgate::jsonrpc::{
    self, ErrorObject, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, TRANSPORT_ERROR,
};
use mcpgate::mcp::{Message, ProtocolVersion, Request};
use mcpgate::streamable_http::{EVENT_STREAM, JSON, PROTOCOL_VERSION, SESSION_ID, check_metadata};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::demo::headers::header_str;
use crate::demo::modern;
use crate::demo::server::{Route, Server, Sink};
use crate::demo::session::Session;

/// Most time between two writes on an idle modern stream: a closed connection is
/// noticed only when a write fails, and closing the stream is how a modern
/// client cancels.
const LIVENESS: Duration = Duration::from_secs(2);

/// Whether a POSTed message is served statelessly (dual-era classification, MCP
/// 2026-07-28 basic/versioning): a request or notification with a `_meta` claim,
/// or one without a claim under a modern `MCP-Protocol-Version` (it then fails
/// the first rung). Responses never are.
pub(crate) fn is_modern(message: &Message, headers: &HeaderMap) -> bool {
    let params = match message {
        Message::Request(r) => r.params.as_deref(),
        Message::Notification(n) => n.params.as_ref(),
        Message::Response(_) => return false,
    };
    modern::claims(params)
        || header_str(headers, PROTOCOL_VERSION)
            .and_then(ProtocolVersion::parse)
            .is_some_and(ProtocolVersion::is_modern)
}

fn json_answer(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, JSON)], body).into_response()
}

fn refuse(status: StatusCode, req: &Request, e: &ErrorObject) -> Response {
    json_answer(status, jsonrpc::error_bytes(Some(&req.id), e))
}

/// Serves one modern message.
pub(crate) async fn post(server: &Server, headers: &HeaderMap, message: Message) -> Response {
    let req = match message {
        Message::Request(r) => r,
        // No client→server notification is defined over HTTP on this revision.
        Message::Notification(_) => return StatusCode::ACCEPTED.into_response(),
        Message::Response(_) => {
            let e = ErrorObject::new(INVALID_REQUEST, "a 2026-07-28 client never sends responses");
            return json_answer(StatusCode::BAD_REQUEST, jsonrpc::error_bytes(None, &e));
        }
    };
    let version = match modern::claimed_version(&req) {
        Ok(v) => v.to_owned(),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &req, &e),
    };
    if let Err(what) = check_metadata(headers, &req.method, req.params.as_deref(), &version) {
        let e = ErrorObject::new(HEADER_MISMATCH, format!("Header mismatch: {what}"));
        return refuse(StatusCode::BAD_REQUEST, &req, &e);
    }
    let stateless = match modern::admit(&req, &version) {
        Ok(s) => s,
        Err(e) if e.code == INVALID_PARAMS => return refuse(StatusCode::BAD_REQUEST, &req, &e),
        Err(e) => return refuse(modern::status_of(e.code), &req, &e),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let session = server.detached(Arc::new(Outgoing(tx.clone())));
    let cancel = CancelOnDrop(session.clone());
    tokio::spawn(async move {
        if let Some(out) = session.handle_stateless(req, stateless).await {
            let _ = tx.send(Out::Final(out));
        }
    });
    match rx.recv().await {
        Some(Out::Final(body)) => json_answer(status_of_answer(&body), body),
        Some(Out::Message(first)) => sse(first, rx, cancel),
        // Cancelled before any answer (the session closed): nothing to send.
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// The status of a JSON answer: by its error code, 200 for a result.
fn status_of_answer(body: &[u8]) -> StatusCode {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_i64())
        .map_or(StatusCode::OK, modern::status_of)
}

/// What the request's detached session sends, in order.
enum Out {
    /// A notification related to the request.
    Message(Vec<u8>),
    /// The response; the stream ends after it.
    Final(Vec<u8>),
}

/// The detached session's sink: everything goes on the request's stream.
struct Outgoing(mpsc::UnboundedSender<Out>);

impl Sink for Outgoing {
    fn send(&self, _route: &Route, message: Vec<u8>) {
        let _ = self.0.send(Out::Message(message));
    }
}

/// Cancels the request when its response stream is dropped (the client closed it,
/// MCP 2026-07-28 basic/patterns/cancellation).
struct CancelOnDrop(Session);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// An SSE answer: `first`, the rest of the request's messages and its response,
/// one `data:` event each, no event ids; comments keep an idle stream written.
fn sse(first: Vec<u8>, rx: mpsc::UnboundedReceiver<Out>, cancel: CancelOnDrop) -> Response {
    struct State {
        first: Option<Vec<u8>>,
        rx: mpsc::UnboundedReceiver<Out>,
        done: bool,
        _cancel: CancelOnDrop,
    }
    let state = State {
        first: Some(first),
        rx,
        done: false,
        _cancel: cancel,
    };
    let body = stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let data = match s.first.take() {
            Some(m) => m,
            None => match tokio::time::timeout(LIVENESS, s.rx.recv()).await {
                Err(_) => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), s)),
                Ok(None) => return None,
                Ok(Some(Out::Message(m))) => m,
                Ok(Some(Out::Final(m))) => {
                    s.done = true;
                    m
                }
            },
        };
        let mut frame = Vec::with_capacity(data.len() + 8);
        frame.extend_from_slice(b"data: ");
        frame.extend_from_slice(&data);
        frame.extend_from_slice(b"\n\n");
        Some((Ok::<Bytes, Infallible>(Bytes::from(frame)), s))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, EVENT_STREAM)
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// 405 with `Allow: POST` for a GET or DELETE from a 2026-07-28 client (no
/// `Mcp-Session-Id`, a modern `MCP-Protocol-Version`): the revision has no GET
/// stream and no sessions (MCP 2026-07-28 streamable-http, earlier revisions).
pub(crate) fn refuse_get_or_delete(headers: &HeaderMap) -> Option<Response> {
    if headers.contains_key(SESSION_ID) {
        return None;
    }
    let modern = header_str(headers, PROTOCOL_VERSION)
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_modern);
    modern.then(|| {
        let e = ErrorObject::new(
            TRANSPORT_ERROR,
            "Method Not Allowed: 2026-07-28 has no GET stream and no sessions; POST requests",
        );
        let mut r = json_answer(
            StatusCode::METHOD_NOT_ALLOWED,
            jsonrpc::error_bytes_without_id(&e),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        r
    })
}
