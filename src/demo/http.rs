//! Streamable HTTP transport: POST, GET and DELETE on one endpoint, with sessions.
//!
//! MCP 2025-11-25 basic/transports "Streamable HTTP": `initialize` creates a session
//! (`Mcp-Session-Id`, random visible ASCII); later requests without it get 400, with an
//! unknown one 404. Requests are answered with `application/json`, or with
//! `text/event-stream` when their handling may send related messages. Notifications
//! and responses get 202. GET opens the standalone stream or resumes one
//! (`Last-Event-ID`); DELETE ends the session. Host/Origin checks guard against DNS
//! rebinding; Accept, Content-Type and `MCP-Protocol-Version` are validated.
//! 2026-07-28 (stateless) messages on the same endpoint are
//! [`http_modern`](super::http_modern)'s.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use mcpgate::jsonrpc::{
    self, EnvelopeError, ErrorObject, INVALID_REQUEST, SESSION_NOT_FOUND, TRANSPORT_ERROR,
};
use mcpgate::mcp::{Message, Method, ProtocolVersion, Request};
use mcpgate::streamable_http::{
    Attached, EVENT_STREAM, JSON, LAST_EVENT_ID, SESSION_ID, accepts, is_json, new_session_id,
};
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::demo::headers::{check_host, header_str, supported_version};
use crate::demo::http_modern;
use crate::demo::server::{Server, lock};
use crate::demo::session::Session;
use crate::demo::streams::Streams;

/// The endpoint path.
pub const ENDPOINT: &str = "/mcp";
/// Interval of SSE keep-alive comments.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Sessions idle this long (no request, no open stream) are forgotten.
const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which `Host`/`Origin` values are accepted (DNS-rebinding protection, MCP 2025-11-25
/// basic/transports "Security Warning": invalid `Origin` → 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPolicy {
    /// Only loopback names (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`:
    /// `mcpgate::streamable_http::is_loopback_name`) in `Host` and `Origin`.
    Localhost,
    /// Any `Host`; an `Origin`, if sent, must name the same authority as `Host`.
    SameOrigin,
}

/// Failures answered on the HTTP plane, before a JSON-RPC id is trusted.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// 403: `Host` or `Origin` not allowed.
    #[error("Forbidden: {0}")]
    Forbidden(&'static str),
    /// 415: the body is not declared as JSON.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 406: the client does not accept what we would send.
    #[error("Not Acceptable: {0}")]
    NotAcceptable(&'static str),
    /// 400: missing session id, bad `MCP-Protocol-Version`, bad `Last-Event-ID`, …
    #[error("Bad Request: {0}")]
    BadRequest(String),
    /// 404: the session does not exist (any more); the client re-initializes.
    #[error("Session not found")]
    SessionNotFound,
    /// 400: the body is not a JSON-RPC message (`-32700`/`-32600`).
    #[error(transparent)]
    Envelope(EnvelopeError),
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let (status, body) = match &self {
            HttpError::Envelope(e) => (
                StatusCode::BAD_REQUEST,
                jsonrpc::error_bytes(e.id(), &e.to_error_object()),
            ),
            other => {
                let (status, code) = match other {
                    HttpError::Forbidden(_) => (StatusCode::FORBIDDEN, TRANSPORT_ERROR),
                    HttpError::UnsupportedMediaType => {
                        (StatusCode::UNSUPPORTED_MEDIA_TYPE, TRANSPORT_ERROR)
                    }
                    HttpError::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, TRANSPORT_ERROR),
                    HttpError::SessionNotFound => (StatusCode::NOT_FOUND, SESSION_NOT_FOUND),
                    _ => (StatusCode::BAD_REQUEST, TRANSPORT_ERROR),
                };
                let e = ErrorObject::new(code, other.to_string());
                (status, jsonrpc::error_bytes_without_id(&e))
            }
        };
        (status, [(header::CONTENT_TYPE, JSON)], body).into_response()
    }
}

/// A Streamable HTTP front for a [`Server`]. Cheap to clone.
#[derive(Clone)]
pub struct HttpServer {
    inner: Arc<HttpInner>,
}

struct HttpInner {
    server: Server,
    host_policy: HostPolicy,
    sessions: Mutex<HashMap<Arc<str>, Arc<HttpSession>>>,
}

struct HttpSession {
    id: Arc<str>,
    session: Session,
    streams: Arc<Streams>,
    last_seen: Mutex<Instant>,
}

impl HttpServer {
    /// A transport for `server` with these `Host`/`Origin` rules.
    pub fn new(server: Server, host_policy: HostPolicy) -> Self {
        HttpServer {
            inner: Arc::new(HttpInner {
                server,
                host_policy,
                sessions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The axum router serving [`ENDPOINT`]. Other methods get 405 with `Allow`.
    pub fn router(&self) -> Router {
        Router::new()
            .route(ENDPOINT, post(post_mcp).get(get_mcp).delete(delete_mcp))
            .with_state(self.clone())
    }

    /// Ends every session (their clients get 404 next and must re-initialize) and
    /// every stateless listen stream (with its graceful result). Returns how many
    /// sessions were ended.
    pub fn drop_sessions(&self) -> usize {
        self.inner.server.stop_listening();
        let all: Vec<Arc<HttpSession>> =
            lock(&self.inner.sessions).drain().map(|(_, s)| s).collect();
        for s in &all {
            end(s);
        }
        all.len()
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), HttpError> {
        check_host(self.inner.host_policy, headers).map_err(HttpError::Forbidden)
    }

    fn session(&self, headers: &HeaderMap) -> Result<Arc<HttpSession>, HttpError> {
        let id = header_str(headers, SESSION_ID).ok_or_else(|| {
            HttpError::BadRequest("No valid session ID provided (Mcp-Session-Id)".into())
        })?;
        let entry = lock(&self.inner.sessions)
            .get(id)
            .cloned()
            .ok_or(HttpError::SessionNotFound)?;
        *lock(&entry.last_seen) = Instant::now();
        Ok(entry)
    }

    fn new_session(&self) -> Arc<HttpSession> {
        let streams = Arc::new(Streams::default());
        let session = self.inner.server.connect(streams.clone());
        Arc::new(HttpSession {
            id: new_session_id(),
            session,
            streams,
            last_seen: Mutex::new(Instant::now()),
        })
    }

    /// Forgets sessions idle past the timeout (checked whenever a session is created).
    fn sweep_idle(&self) {
        let expired: Vec<Arc<HttpSession>> = {
            let mut sessions = lock(&self.inner.sessions);
            let ids: Vec<Arc<str>> = sessions
                .values()
                .filter(|s| {
                    lock(&s.last_seen).elapsed() > SESSION_IDLE_TIMEOUT && !s.streams.has_live()
                })
                .map(|s| s.id.clone())
                .collect();
            ids.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        for s in &expired {
            end(s);
        }
    }
}

fn end(s: &HttpSession) {
    s.session.close();
    s.streams.close_all();
}

fn unsupported_version() -> HttpError {
    let supported: Vec<&str> = ProtocolVersion::HOST_SUPPORTED
        .iter()
        .map(|v| v.as_str())
        .collect();
    HttpError::BadRequest(format!(
        "Unsupported MCP-Protocol-Version (supported: {})",
        supported.join(", ")
    ))
}

fn with_session(mut response: Response, session_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(session_id) {
        response.headers_mut().insert(SESSION_ID, v);
    }
    response
}

fn json_response(body: Vec<u8>, session_id: Option<&str>) -> Response {
    let r = (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], body).into_response();
    match session_id {
        Some(id) => with_session(r, id),
        None => r,
    }
}

/// An SSE answer: the events of `attached` (after a priming event when `prime`).
fn sse_response(attached: Attached, prime: bool, session_id: &str) -> Response {
    let body = attached
        .into_sse(prime, KEEP_ALIVE)
        .map(Ok::<Bytes, Infallible>);
    let r = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, EVENT_STREAM)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    with_session(r, session_id)
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

async fn post_mcp(
    State(http): State<HttpServer>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    http.check_host(&headers)?;
    if !is_json(&headers) {
        return Err(HttpError::UnsupportedMediaType);
    }
    if !accepts(&headers, JSON) && !accepts(&headers, EVENT_STREAM) {
        return Err(HttpError::NotAcceptable(
            "Client must accept both application/json and text/event-stream",
        ));
    }
    let mut message = if body.trim_ascii_start().first() == Some(&b'[') {
        None
    } else {
        Some(jsonrpc::parse_message(&body).map_err(HttpError::Envelope)?)
    };
    if let Some(m) = message.take_if(|m| http_modern::is_modern(m, &headers)) {
        return Ok(http_modern::post(&http.inner.server, &headers, m).await);
    }
    if !supported_version(&headers) {
        return Err(unsupported_version());
    }
    let Some(message) = message else {
        let entry = http.session(&headers)?;
        let items: Vec<Box<RawValue>> = serde_json::from_slice(&body)
            .map_err(|e| HttpError::Envelope(EnvelopeError::Parse(e.to_string())))?;
        return Ok(match entry.session.handle_batch(items).await {
            Some(out) => json_response(out, Some(&entry.id)),
            None => accepted(),
        });
    };
    match message {
        Message::Request(req)
            if req.method == Method::Initialize && header_str(&headers, SESSION_ID).is_none() =>
        {
            initialize(&http, &headers, req).await
        }
        Message::Request(req) => {
            let entry = http.session(&headers)?;
            Ok(answer(&entry, &headers, req).await)
        }
        Message::Notification(n) => {
            http.session(&headers)?.session.handle_notification(n);
            Ok(accepted())
        }
        Message::Response(r) => {
            http.session(&headers)?.session.handle_response(r);
            Ok(accepted())
        }
    }
}

/// Creates a session for an `initialize` request; it is kept only if initialization succeeded.
/// The answer is JSON unless the client accepts only `text/event-stream`.
async fn initialize(
    http: &HttpServer,
    headers: &HeaderMap,
    req: Request,
) -> Result<Response, HttpError> {
    http.sweep_idle();
    let entry = http.new_session();
    let id = req.id.clone();
    let out = entry.session.handle_request(req).await.unwrap_or_default();
    let Some(version) = entry.session.protocol_version() else {
        end(&entry);
        return Ok(json_response(out, None));
    };
    entry.streams.set_priming(version.primes_streams());
    lock(&http.inner.sessions).insert(entry.id.clone(), entry.clone());
    tracing::info!(session = %entry.id, %version, "session started");
    if !accepts(headers, JSON)
        && let Some(attached) = entry.streams.open_request(&id)
    {
        entry.streams.finish(&id, Some(out));
        return Ok(sse_response(attached, entry.streams.primes(), &entry.id));
    }
    Ok(json_response(out, Some(&entry.id)))
}

/// Answers a request as JSON or on its own SSE stream: SSE for the methods whose
/// handlers may send related requests and notifications first, when the client
/// accepts it, and for a client that accepts only SSE.
async fn answer(entry: &Arc<HttpSession>, headers: &HeaderMap, req: Request) -> Response {
    let wants_sse = matches!(
        req.method,
        Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead
    );
    let use_sse = (wants_sse && accepts(headers, EVENT_STREAM)) || !accepts(headers, JSON);
    if !use_sse {
        return match entry.session.handle_request(req).await {
            Some(out) => json_response(out, Some(&entry.id)),
            // Cancelled: no JSON-RPC response may be sent (basic/utilities/cancellation).
            None => accepted(),
        };
    }
    let Some(attached) = entry.streams.open_request(&req.id) else {
        let e = ErrorObject::new(INVALID_REQUEST, "Request id is already in use");
        return json_response(jsonrpc::error_bytes(Some(&req.id), &e), Some(&entry.id));
    };
    let (session, streams, id) = (entry.session.clone(), entry.streams.clone(), req.id.clone());
    // The request runs on its own task: a client disconnect is not a cancellation
    // (basic/transports), and its events stay recorded for resumption.
    tokio::spawn(async move {
        let out = session.handle_request(req).await;
        streams.finish(&id, out);
    });
    sse_response(attached, entry.streams.primes(), &entry.id)
}

async fn get_mcp(
    State(http): State<HttpServer>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    http.check_host(&headers)?;
    if let Some(refused) = http_modern::refuse_get_or_delete(&headers) {
        return Ok(refused);
    }
    if !accepts(&headers, EVENT_STREAM) {
        return Err(HttpError::NotAcceptable(
            "Client must accept text/event-stream",
        ));
    }
    if !supported_version(&headers) {
        return Err(unsupported_version());
    }
    let entry = http.session(&headers)?;
    let response = match header_str(&headers, LAST_EVENT_ID) {
        // A resumed stream continues where it was: no priming event.
        Some(last) => {
            let attached = entry
                .streams
                .resume(last)
                .map_err(|e| HttpError::BadRequest(e.to_string()))?;
            sse_response(attached, false, &entry.id)
        }
        None => {
            let prime = entry.streams.primes();
            let attached = entry
                .streams
                .open_standalone(prime)
                .ok_or(HttpError::SessionNotFound)?;
            sse_response(attached, prime, &entry.id)
        }
    };
    Ok(response)
}

async fn delete_mcp(
    State(http): State<HttpServer>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    http.check_host(&headers)?;
    if let Some(refused) = http_modern::refuse_get_or_delete(&headers) {
        return Ok(refused);
    }
    let entry = http.session(&headers)?;
    lock(&http.inner.sessions).remove(&entry.id);
    end(&entry);
    tracing::info!(session = %entry.id, "session ended by client");
    Ok(StatusCode::OK.into_response())
}
