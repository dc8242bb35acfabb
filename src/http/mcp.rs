//! The MCP endpoint's handlers: POST (messages), GET (standalone stream) and
//! DELETE (end session), per MCP 2025-11-25 basic/transports, Streamable HTTP.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, FromRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::headers::{self, SESSION};
use super::sse::{json_response, sse_response, stream_reply};
use super::{AppState, HttpError};
use crate::auth::Principal;
use crate::jsonrpc::{self, EnvelopeError, ErrorObject, Message, Request};
use crate::protocol::{META_PROTOCOL_VERSION, ProtocolVersion};
use crate::router::Reply;
use crate::session::{ResumeError, Session, StreamSlot};

/// The principal the auth middleware put in the request (`None`: open endpoint).
type Caller = Option<Extension<Arc<Principal>>>;

/// HTTP 413 for a request whose `Content-Length` announces more than
/// `server.max_body_bytes`, decided before any of the body is read (a client that
/// announces 5 MB and sends 2 bytes would otherwise wait for the body read
/// timeout). Bodies without a length are cut off at the limit while they are
/// read (`DefaultBodyLimit`).
fn check_announced_length(h: &HeaderMap, limit: usize) -> Result<(), HttpError> {
    let announced = h
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::INVALID_REQUEST,
            format!("request body larger than {limit} bytes (server.max_body_bytes)"),
        ));
    }
    Ok(())
}

/// Whether reading the body failed on tower-http's body read timeout.
fn body_timed_out(rejection: &BytesRejection) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// `POST /mcp`: one JSON-RPC message (or, for 2025-03-26 sessions, a batch).
pub async fn post(
    State(st): State<AppState>,
    caller: Caller,
    h: HeaderMap,
    req: axum::extract::Request,
) -> Response {
    if let Err(e) = check_announced_length(&h, st.router.server.max_body_bytes) {
        return reject(&st, e);
    }
    let body = match Bytes::from_request(req, &()).await {
        Ok(b) => b,
        Err(rejection) if body_timed_out(&rejection) => {
            let e = HttpError::new(
                StatusCode::REQUEST_TIMEOUT,
                jsonrpc::INVALID_REQUEST,
                "the request body did not arrive within server.body_read_timeout",
            );
            return reject(&st, e);
        }
        Err(rejection) => {
            let status = rejection.status();
            let e = HttpError::new(status, jsonrpc::INVALID_REQUEST, rejection.body_text());
            return reject(&st, e);
        }
    };
    st.router.metrics.bytes_in.inc_by(body.len() as u64);
    let principal = caller.map(|Extension(p)| p);
    match post_inner(&st, &h, &body, principal.as_ref()).await {
        Ok(r) => r,
        Err(e) => reject(&st, e),
    }
}

async fn post_inner(
    st: &AppState,
    h: &HeaderMap,
    body: &[u8],
    principal: Option<&Arc<Principal>>,
) -> Result<Response, HttpError> {
    headers::check_origin(h, &st.origins)?;
    headers::check_content_type(h)?;
    headers::check_post_accept(h)?;
    if body.trim_ascii_start().first() == Some(&b'[') {
        return batch(st, h, body, principal).await;
    }
    let msg = jsonrpc::parse_message(body).map_err(|e| HttpError::envelope(&e))?;
    if let Message::Request(req) = &msg {
        if let Some(requested) = modern_version(req) {
            return Err(modern_probe_refused(
                &req.id,
                &format!("revision {requested:?}"),
            ));
        }
        if req.method == "initialize" {
            return initialize(st, req, principal).await;
        }
        if req.method == "server/discover" && headers::session_id(h).is_none() {
            return Err(modern_probe_refused(&req.id, "server/discover"));
        }
    }
    let session = lookup(st, h, principal)?;
    headers::protocol_version(h)?;
    session.touch();
    Ok(match msg {
        Message::Notification(n) => {
            st.router.handle_notification(&session, &n);
            accepted()
        }
        Message::Response(r) => {
            st.router.handle_response(&session, r);
            accepted()
        }
        Message::Request(req) => {
            let slot = reserve_stream(st, &session)?;
            answer(st, &session, req, slot).await
        }
    })
}

/// Counts an HTTP-plane rejection by reason and turns it into the response.
fn reject(st: &AppState, e: HttpError) -> Response {
    let reason = match (e.status.as_u16(), e.detail.error.code) {
        (403, _) => "origin",
        (406, _) => "accept",
        (415, _) => "content_type",
        (413, _) => "body_too_large",
        (408, _) => "body_timeout",
        (404, _) => "session_unknown",
        (410, _) | (400, jsonrpc::TRANSPORT_ERROR)
            if e.detail.error.message.contains("Last-Event-ID") =>
        {
            "resume"
        }
        (400, jsonrpc::TRANSPORT_ERROR) if e.detail.error.message.contains("Mcp-Session-Id") => {
            "session_missing"
        }
        (400, jsonrpc::TRANSPORT_ERROR)
            if e.detail.error.message.contains(MODERN_PROBE_REFUSED) =>
        {
            "modern_probe"
        }
        (400, jsonrpc::TRANSPORT_ERROR) => "version",
        (400, _) => "invalid_message",
        (503, _) => "too_many_sessions",
        (429, _) if e.detail.error.message.contains("streams") => "too_many_streams",
        (429, _) => "rate_limited",
        _ => "other",
    };
    st.router
        .metrics
        .rejections
        .with_label_values(&[reason])
        .inc();
    tracing::debug!(status = e.status.as_u16(), reason, "request refused");
    e.into_response()
}

/// A stream slot for a request about to be answered (POST) or a GET stream;
/// 429 when the session already holds `max_streams_per_session` of them.
fn reserve_stream(st: &AppState, session: &Arc<Session>) -> Result<StreamSlot, HttpError> {
    session
        .reserve_stream(st.router.server.max_streams_per_session)
        .map_err(|open| {
            HttpError::new(
                StatusCode::TOO_MANY_REQUESTS,
                jsonrpc::TRANSPORT_ERROR,
                format!(
                    "Too Many Requests: this session already holds {open} open streams \
                     (server.max_streams_per_session)"
                ),
            )
        })
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// The session named by `Mcp-Session-Id`: 400 without the header, 404 when
/// unknown, expired or ended (the host then re-initializes), or when it belongs
/// to another principal.
fn lookup(
    st: &AppState,
    h: &HeaderMap,
    principal: Option<&Arc<Principal>>,
) -> Result<Arc<Session>, HttpError> {
    match h.get_all(headers::SESSION).iter().count() {
        0 => return Err(HttpError::missing_session()),
        1 => {}
        _ => {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                jsonrpc::TRANSPORT_ERROR,
                "Bad Request: more than one Mcp-Session-Id header",
            ));
        }
    }
    // Present but not visible ASCII: no session of ours has such an id.
    let id = headers::session_id(h).ok_or_else(HttpError::unknown_session)?;
    let session = st
        .router
        .sessions
        .get(id)
        .ok_or_else(HttpError::unknown_session)?;
    super::auth::bind(st, &session, principal)?;
    Ok(session)
}

async fn answer(st: &AppState, session: &Arc<Session>, req: Request, slot: StreamSlot) -> Response {
    use tracing::Instrument;
    // One span per host request (issue 5): routing fills in backend and tool.
    let span = tracing::info_span!(
        "request",
        id = %req.id,
        session = %session.log_id,
        method = %req.method,
        backend = tracing::field::Empty,
        tool = tracing::field::Empty,
    );
    answer_inner(st, session, req, slot).instrument(span).await
}

async fn answer_inner(
    st: &AppState,
    session: &Arc<Session>,
    req: Request,
    slot: StreamSlot,
) -> Response {
    let server = &st.router.server;
    match st.router.handle_request(session, req).await {
        Reply::Now(bytes) => {
            st.router.metrics.bytes_out.inc_by(bytes.len() as u64);
            json_response(bytes)
        }
        Reply::Stream(rx) => {
            stream_reply(
                rx,
                session,
                slot,
                server.json_response_window,
                server.sse_keep_alive,
                &st.router.metrics,
            )
            .await
        }
    }
}

/// `params._meta["io.modelcontextprotocol/protocolVersion"]`: the mark of a
/// 2026-07-28 ("modern") request (MCP 2026-07-28 basic/versioning).
fn modern_version(req: &Request) -> Option<String> {
    req.params
        .as_ref()?
        .get("_meta")?
        .get(META_PROTOCOL_VERSION)?
        .as_str()
        .map(str::to_owned)
}

/// Marks the message of [`modern_probe_refused`] (and its rejection reason).
const MODERN_PROBE_REFUSED: &str = "is not served here";

/// R0 (shared/design/dual-era.md): the answer to a 2026-07-28 probe while this
/// endpoint serves only the session-based revisions. 400 with `-32000`, the
/// request's `id`, and a message naming the revisions served and `initialize`,
/// e.g. `Bad Request: server/discover is not served here; this endpoint serves
/// 2025-11-25, 2025-06-18, 2025-03-26: use initialize`.
///
/// Never a modern-era code (`-32020`…`-32022`): a client that recognizes one
/// takes it for a modern server and retries instead of falling back
/// (MCP 2026-07-28 basic/transports/streamable-http, Backward Compatibility);
/// rmcp 3.11 `Auto` then fails with `NoCompatibleProtocolVersion`.
fn modern_probe_refused(id: &jsonrpc::Id, what: &str) -> HttpError {
    let served: Vec<&str> = ProtocolVersion::HOST_SUPPORTED
        .iter()
        .map(|v| v.as_str())
        .collect();
    let mut e = HttpError::new(
        StatusCode::BAD_REQUEST,
        jsonrpc::TRANSPORT_ERROR,
        format!(
            "Bad Request: {what} {MODERN_PROBE_REFUSED}; this endpoint serves {}: use initialize",
            served.join(", ")
        ),
    );
    e.detail.id = Some(Some(id.clone()));
    e
}

/// `initialize`: negotiates the revision, opens a session and answers with the
/// aggregated capabilities (MCP 2025-11-25 basic/lifecycle).
async fn initialize(
    st: &AppState,
    req: &Request,
    principal: Option<&Arc<Principal>>,
) -> Result<Response, HttpError> {
    let started = tokio::time::Instant::now();
    let count = |outcome| {
        let secs = started.elapsed().as_secs_f64();
        st.router
            .metrics
            .observe_request("initialize", "none", outcome, secs);
    };
    let params = req.params.as_ref();
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let Some(requested) = requested else {
        let e = ErrorObject::new(
            jsonrpc::INVALID_PARAMS,
            "initialize: params.protocolVersion must be a string",
        );
        count(crate::metrics::Outcome::Error);
        return Ok(json_response(
            jsonrpc::error_bytes(Some(&req.id), &e).into(),
        ));
    };
    let version = ProtocolVersion::parse(requested)
        .filter(|v| ProtocolVersion::HOST_SUPPORTED.contains(v))
        .unwrap_or(ProtocolVersion::LATEST);
    let capabilities = params
        .and_then(|p| p.get("capabilities"))
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let client_info = params
        .and_then(|p| p.get("clientInfo"))
        .cloned()
        .unwrap_or(Value::Null);
    st.router
        .wait_loaded(std::time::Duration::from_secs(10))
        .await;
    let key = st.router.view_key(principal.map(|p| &**p));
    let session = Arc::new(
        Session::new(version, capabilities, client_info)
            .with_principal(principal.map(|p| &**p), key.clone()),
    );
    session.events.count_drops_in(
        st.router
            .metrics
            .dropped_messages
            .with_label_values(&["slow_host"]),
    );
    if let Err(full) = st.router.sessions.insert(session.clone()) {
        tracing::warn!(
            limit = full.limit,
            "session limit reached; initialize refused"
        );
        return Err(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Service Unavailable: too many sessions",
        ));
    }
    let view = st.router.view_for_key(&key);
    let mut capabilities = view.capabilities.clone();
    if version < ProtocolVersion::V2025_11_25
        && let Some(c) = capabilities.as_object_mut()
    {
        c.remove("tasks");
    }
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")},
    });
    if let Some(text) = &view.instructions {
        result["instructions"] = text.clone().into();
    }
    tracing::info!(session = %crate::session::log_id(&session.id), version = %version, "session started");
    count(crate::metrics::Outcome::Ok);
    let mut resp = json_response(jsonrpc::result_value_bytes(&req.id, &result).into());
    if let Ok(v) = HeaderValue::from_str(&session.id) {
        resp.headers_mut().insert(SESSION, v);
    }
    Ok(resp)
}

/// A JSON-RPC batch: only for sessions that negotiated 2025-03-26, where the spec
/// required receivers to accept them. Each element is handled like a single
/// message; `initialize` may not be part of one.
async fn batch(
    st: &AppState,
    h: &HeaderMap,
    body: &[u8],
    principal: Option<&Arc<Principal>>,
) -> Result<Response, HttpError> {
    let items: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| HttpError::envelope(&EnvelopeError::Parse(e.to_string())))?;
    let invalid = |reason: &'static str| {
        HttpError::envelope(&EnvelopeError::Invalid {
            id: None,
            reason: reason.into(),
        })
    };
    if items.is_empty() {
        return Err(invalid("an empty batch is not a request"));
    }
    let session = lookup(st, h, principal)?;
    headers::protocol_version(h)?;
    if !session.version.allows_batches() {
        return Err(invalid(
            "JSON-RPC batches are not allowed in this protocol revision",
        ));
    }
    session.touch();
    let mut answers = Vec::new();
    for item in items {
        let msg = match jsonrpc::classify_raw(item) {
            Ok(m) => m,
            Err(e) => {
                answers.push(jsonrpc::error_bytes(e.id(), &e.to_error_object()));
                continue;
            }
        };
        match msg {
            Message::Request(req) if req.method == "initialize" => {
                let e = ErrorObject::new(
                    jsonrpc::INVALID_REQUEST,
                    "initialize must not be part of a batch",
                );
                answers.push(jsonrpc::error_bytes(Some(&req.id), &e));
            }
            Message::Request(req) => match st.router.handle_request(&session, req).await {
                Reply::Now(b) => answers.push(b.to_vec()),
                Reply::Stream(mut rx) => {
                    while let Some(m) = rx.recv().await {
                        if let crate::session::Outbound::Final(b) = m {
                            answers.push(b.to_vec());
                        }
                    }
                }
            },
            Message::Notification(n) => st.router.handle_notification(&session, &n),
            Message::Response(r) => st.router.handle_response(&session, r),
        }
    }
    if answers.is_empty() {
        return Ok(accepted());
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
    Ok(json_response(out.into()))
}

/// `GET /mcp`: the standalone SSE stream for messages unrelated to any request,
/// or, with `Last-Event-ID`, the resumption of an interrupted stream (its events
/// after that id, on that stream only).
pub async fn get(State(st): State<AppState>, caller: Caller, h: HeaderMap) -> Response {
    let principal = caller.map(|Extension(p)| p);
    let result = (|| {
        headers::check_origin(&h, &st.origins)?;
        headers::check_get_accept(&h)?;
        let session = lookup(&st, &h, principal.as_ref())?;
        headers::protocol_version(&h)?;
        Ok::<_, HttpError>(session)
    })();
    let session = match result {
        Ok(s) => s,
        Err(e) => return reject(&st, e),
    };
    session.touch();
    let slot = match reserve_stream(&st, &session) {
        Ok(slot) => slot,
        Err(e) => return reject(&st, e),
    };
    let keep_alive = st.router.server.sse_keep_alive;
    let last_event = h
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("invalid"));
    match last_event {
        None => sse_response(
            slot,
            session.version.primes_streams(),
            session.events.attach_standalone(),
            keep_alive,
            &st.router.metrics,
        ),
        Some(id) => match session.events.resume(id) {
            Ok(attached) => sse_response(slot, false, attached, keep_alive, &st.router.metrics),
            Err(e) => {
                let status = match e {
                    ResumeError::Malformed => StatusCode::BAD_REQUEST,
                    ResumeError::Gone => StatusCode::GONE,
                };
                reject(
                    &st,
                    HttpError::new(status, jsonrpc::TRANSPORT_ERROR, e.to_string()),
                )
            }
        },
    }
}

/// `DELETE /mcp`: ends the session and its backend state (HTTP backends get a
/// `DELETE` of their own session, per-session stdio children are stopped).
pub async fn delete(State(st): State<AppState>, caller: Caller, h: HeaderMap) -> Response {
    let principal = caller.map(|Extension(p)| p);
    let result = (|| {
        headers::check_origin(&h, &st.origins)?;
        let session = lookup(&st, &h, principal.as_ref())?;
        headers::protocol_version(&h)?;
        Ok::<_, HttpError>(session)
    })();
    match result {
        Ok(session) => {
            tracing::info!(session = %crate::session::log_id(&session.id), "session deleted by the client");
            // Unknown from now on; backend connections close in the background
            // (a child that ignores SIGTERM must not hold up the answer).
            st.router.sessions.remove(&session.id);
            let router = st.router.clone();
            tokio::spawn(async move { router.end_session(&session).await });
            StatusCode::OK.into_response()
        }
        Err(e) => reject(&st, e),
    }
}
