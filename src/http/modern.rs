//! The 2026-07-28 ("modern", stateless) server face on the same endpoint (MCP
//! 2026-07-28 basic/transports/streamable-http, basic/index, basic/versioning).
//!
//! [`era_of`] decides the era of a POST before any session lookup: a request or
//! notification whose `params._meta` claims a protocol version is modern, whatever
//! its method and even with an `Mcp-Session-Id` (ignored: never minted or echoed
//! on this path); so is a body without the claim under a modern
//! `MCP-Protocol-Version` header (it then fails the first rung below). A modern
//! request climbs the validation ladder, first failure wins, every error echoing
//! its id: the `_meta` fields (400/-32602), the routed body member (`params.name`
//! or `params.uri` a string, 400/-32602: a type error in the body wins over a
//! header that cannot mirror it; `params.requestState` a string and
//! `params.inputResponses` an object when present, 400/-32602), the headers
//! against the body
//! (400/-32020), the revision (400/-32022 with `data.supported`), the method
//! (404/-32601); then the dispatch serves it as a [`Host::Modern`]. The answer is
//! JSON, or an SSE stream without event ids (not resumable) whose close cancels
//! the work upstream.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use super::session::reject;
use super::sse::json_response;
use super::{AppState, HttpError};
use crate::auth::Principal;
use crate::dispatch::Reply;
use crate::jsonrpc::{self, Id};
use crate::mcp::{
    LogLevel, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION, Message, Method,
    ProtocolVersion, Request,
};
use crate::request::{Outcome, Rejection, RequestContext, request_span};
use crate::session::{Host, ModernHost, Outbound};
use crate::streamable_http::{PROTOCOL_VERSION, SESSION_ID, check_metadata, name_param};

/// How long a request waits for backends still loading at start (until every
/// backend's first connection attempt is over): `initialize`, and any request
/// of a session restored on a process that has just started, which a load
/// balancer may send before readiness (a rolling restart, `option persist`).
/// One bound for both, so that a session sees the whole catalogue either way
/// (a slow stdio child takes seconds to list its tools).
pub(super) const LOAD_WAIT: Duration = Duration::from_secs(10);
/// Most time between two writes on an idle modern stream. A closed connection
/// is noticed only when a write fails, and closing the stream is how a modern
/// client cancels: a comment every second finds a gone client within ~2 s.
const LIVENESS: Duration = Duration::from_secs(1);

/// The era of a message (dual-era classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// Session-based: 2025-03-26, 2025-06-18, 2025-11-25.
    Legacy,
    /// Stateless: 2026-07-28.
    Modern,
}

/// The `params._meta` protocol version claim of a request or notification.
pub fn claim(msg: &Message) -> Option<&Value> {
    let params: &Value = match msg {
        // Text without `_meta` is not parsed here (`tools/call`, the hot path).
        Message::Request(r) => r.params.as_ref().filter(|p| p.may_have("_meta"))?,
        Message::Notification(n) => n.params.as_ref()?,
        Message::Response(_) => return None,
    };
    params.get("_meta")?.get(META_PROTOCOL_VERSION)
}

/// The era of a POSTed message: modern with a `_meta` claim, or without one under
/// a modern `MCP-Protocol-Version` header; legacy otherwise (responses always).
pub fn era_of(msg: &Message, h: &HeaderMap) -> Era {
    if claim(msg).is_some() {
        return Era::Modern;
    }
    let modern_header = h
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_modern);
    if modern_header && !matches!(msg, Message::Response(_)) {
        Era::Modern
    } else {
        Era::Legacy
    }
}

/// A refusal on the modern path: the status, the code and the request's id.
fn refuse(
    reason: Rejection,
    status: StatusCode,
    code: i64,
    id: &Id,
    message: impl Into<String>,
) -> HttpError {
    let mut e = HttpError::new(reason, status, code, message);
    e.detail.id = Some(Some(id.clone()));
    e
}

/// Serves one modern message.
pub async fn serve(
    st: &AppState,
    mut ctx: RequestContext,
    h: &HeaderMap,
    msg: Message,
    principal: Option<Arc<Principal>>,
) -> Response {
    let req = match msg {
        Message::Request(r) => r,
        // No client→server notification is defined over HTTP on this revision
        // (cancellation is closing the stream): accepted and ignored.
        Message::Notification(_) => {
            ctx.set_status(202);
            ctx.finish(Outcome::Ok);
            return StatusCode::ACCEPTED.into_response();
        }
        Message::Response(_) => {
            let e = HttpError::envelope(&jsonrpc::EnvelopeError::Invalid {
                id: None,
                reason: "a 2026-07-28 client never sends responses".into(),
            });
            return reject(ctx, e);
        }
    };
    let host = match validate(st, h, &req, principal.as_ref(), &ctx) {
        Ok(host) => host,
        Err(e) => return reject(ctx, e),
    };
    ctx.set_revision(host.version);
    let host = Host::Modern(Arc::new(host));
    // A stateless client may call before it lists (no handshake waits for the
    // backends at start, as `initialize` does): give them a bounded moment.
    st.supervisor.wait_loaded(LOAD_WAIT).await;
    if let Err(e) = check_params(st, h, &req, &host) {
        return reject(ctx, e);
    }
    use tracing::Instrument;
    let span = request_span(&req.id, &req.method, None);
    let reply = st.dispatch.handle(ctx, &host, req).instrument(span).await;
    match reply {
        Reply::Now(bytes) => {
            st.metrics.bytes_out.inc_by(bytes.len() as u64);
            answer(bytes)
        }
        Reply::Stream(rx) => {
            let server = &st.server;
            let keep_alive = server.sse_keep_alive.min(LIVENESS);
            respond(rx, server.json_response_window, keep_alive, st).await
        }
        Reply::Call(call) => {
            let server = &st.server;
            let keep_alive = server.sse_keep_alive.min(LIVENESS);
            respond(call.detach(), server.json_response_window, keep_alive, st).await
        }
    }
}

/// The validation ladder; on success, what the request declares.
fn validate(
    st: &AppState,
    h: &HeaderMap,
    req: &Request,
    principal: Option<&Arc<Principal>>,
    ctx: &RequestContext,
) -> Result<ModernHost, HttpError> {
    let endpoint = ctx.endpoint();
    let id = &req.id;
    let meta = req.params.as_ref().and_then(|p| p.get("_meta"));
    if meta.is_some_and(|m| !m.is_object()) {
        return Err(refuse(
            Rejection::ModernEnvelope,
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            id,
            "Invalid params: params._meta must be an object",
        ));
    }
    let field = |key: &str| meta.and_then(|m| m.get(key));
    // Absent (or null) is "is required"; present with another type says which.
    let invalid = |what: &str, kind: &str| {
        let problem = match field(what) {
            None | Some(Value::Null) => "is required".to_owned(),
            Some(_) => format!("must be {kind}"),
        };
        refuse(
            Rejection::ModernEnvelope,
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            id,
            format!("Invalid params: params._meta[\"{what}\"] {problem}"),
        )
    };
    let requested = field(META_PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(META_PROTOCOL_VERSION, "a string"))?;
    let capabilities = field(META_CLIENT_CAPABILITIES)
        .filter(|c| c.is_object())
        .ok_or_else(|| invalid(META_CLIENT_CAPABILITIES, "an object"))?;
    // The body's own type error wins over a header that cannot mirror it.
    if served(&req.method)
        && let Some(member) = name_param(&req.method)
        && !req
            .params
            .as_ref()
            .and_then(|p| p.get(member))
            .is_some_and(Value::is_string)
    {
        return Err(refuse(
            Rejection::ModernEnvelope,
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            id,
            format!("Invalid params: params.{member} must be a string"),
        ));
    }
    retry_members(req)?;
    check_headers(h, req, requested)?;
    let version = ProtocolVersion::parse(requested)
        .filter(|v| v.is_modern())
        .ok_or_else(|| unsupported_version(id, requested))?;
    if !served(&req.method) {
        return Err(refuse(
            Rejection::MethodNotFound,
            StatusCode::NOT_FOUND,
            jsonrpc::METHOD_NOT_FOUND,
            id,
            format!("Method not found: {}", jsonrpc::clip(req.method.as_str())),
        ));
    }
    let log_level = match field(META_LOG_LEVEL) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            refuse(
                Rejection::ModernEnvelope,
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_PARAMS,
                id,
                format!(
                    "Invalid params: unknown log level {}",
                    jsonrpc::clip(&v.to_string())
                ),
            )
        })?),
    };
    Ok(ModernHost {
        version,
        capabilities: capabilities.clone(),
        log_level,
        principal: principal.map(|p| p.id()),
        view_key: st.catalog.view_key_at(endpoint, principal.map(|p| &**p)),
        client: ctx.client(),
    })
}

/// The members of a retry after `input_required` (MCP 2026-07-28 multi-round
/// requests), typed as the other malformed fields are (400/-32602, the request's
/// id): `params.requestState` a string, `params.inputResponses` an object, when
/// present. Whether the state is one the gateway issued is the dispatch's
/// question (an in-band -32602).
fn retry_members(req: &Request) -> Result<(), HttpError> {
    let params = req.params.as_ref();
    for (member, is_ok, want) in [
        (
            "requestState",
            Value::is_string as fn(&Value) -> bool,
            "a string",
        ),
        ("inputResponses", Value::is_object, "an object"),
    ] {
        if params
            .and_then(|p| p.get(member))
            .is_some_and(|v| !is_ok(v))
        {
            return Err(refuse(
                Rejection::ModernEnvelope,
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_PARAMS,
                &req.id,
                format!("Invalid params: params.{member} must be {want}"),
            ));
        }
    }
    Ok(())
}

/// The methods the modern face serves. `initialize`, `ping`, `logging/setLevel`,
/// `resources/(un)subscribe` and the 2025-11-25 core tasks do not exist on this
/// revision (MCP 2026-07-28 changelog).
fn served(method: &Method) -> bool {
    matches!(
        method,
        Method::ServerDiscover
            | Method::ToolsList
            | Method::ToolsCall
            | Method::PromptsList
            | Method::PromptsGet
            | Method::ResourcesList
            | Method::ResourcesTemplatesList
            | Method::ResourcesRead
            | Method::CompletionComplete
            | Method::SubscriptionsListen
    )
}

/// 400 + -32022 naming every revision the endpoint serves.
fn unsupported_version(id: &Id, requested: &str) -> HttpError {
    let supported: Vec<&str> = ProtocolVersion::SERVED.iter().map(|v| v.as_str()).collect();
    let shown = jsonrpc::clip(requested);
    // A session revision claimed in `_meta` is served, but only through a session.
    let message = match ProtocolVersion::parse(requested) {
        Some(v) if !v.is_modern() => format!(
            "Unsupported protocol version for a request without a session: {shown} is a \
             session revision (send initialize)"
        ),
        _ => format!("Unsupported protocol version: {shown}"),
    };
    let mut e = refuse(
        Rejection::Version,
        StatusCode::BAD_REQUEST,
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        id,
        message,
    );
    e.detail.error.data = Some(json!({"supported": supported, "requested": shown}));
    e
}

/// The standard headers against the body (MCP 2026-07-28 streamable-http,
/// request metadata and server validation; the rule is
/// [`streamable_http::check_metadata`](crate::streamable_http::check_metadata)).
pub(crate) fn check_headers(
    h: &HeaderMap,
    req: &Request,
    requested: &str,
) -> Result<(), HttpError> {
    check_metadata(h, &req.method, req.params.as_deref(), requested).map_err(|what| {
        refuse(
            Rejection::HeaderMismatch,
            StatusCode::BAD_REQUEST,
            jsonrpc::HEADER_MISMATCH,
            &req.id,
            format!("Header mismatch: {what}"),
        )
    })
}

/// A `tools/call`'s `Mcp-Param-*` headers against the called tool's
/// `x-mcp-header` annotations ([`ParamHeaders::check`](crate::streamable_http::ParamHeaders::check); MCP 2026-07-28
/// streamable-http, custom headers: whoever reads the body refuses a disagreement
/// with 400 and -32020). A tool the caller cannot see is left to the dispatcher's
/// unknown-tool error.
fn check_params(st: &AppState, h: &HeaderMap, req: &Request, host: &Host) -> Result<(), HttpError> {
    if req.method != Method::ToolsCall {
        return Ok(());
    }
    let params = req.params.as_ref();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let view = st.catalog.view_for_key(&host.view_key());
    let Some(headers) = view.tools.get(name).and_then(|r| r.headers.as_ref()) else {
        return Ok(());
    };
    headers
        .check(h, params.and_then(|p| p.get("arguments")))
        .map_err(|what| {
            refuse(
                Rejection::HeaderMismatch,
                StatusCode::BAD_REQUEST,
                jsonrpc::HEADER_MISMATCH,
                &req.id,
                format!("Header mismatch: {what}"),
            )
        })
}

/// A JSON answer, its status by its error code (MCP 2026-07-28 basic/index,
/// error codes; streamable-http): 400 for -32021 (a capability the request did
/// not declare, whether the gateway or the backend found it), 200 for results and
/// the in-band errors (-32601 is refused before dispatch, with 404). Once an SSE
/// stream has started the status is 200 whatever the response.
fn answer(body: Bytes) -> Response {
    let status = match error_code(&body) {
        Some(jsonrpc::MISSING_CLIENT_CAPABILITY) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    let mut resp = json_response(body);
    *resp.status_mut() = status;
    resp
}

/// The `error.code` of a JSON-RPC response. Only bodies small enough to be an
/// error are read (results can be megabytes and never change the status).
fn error_code(body: &[u8]) -> Option<i64> {
    const ERROR_MAX: usize = 16 * 1024;
    #[derive(serde::Deserialize)]
    struct Response {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    if body.len() > ERROR_MAX {
        return None;
    }
    serde_json::from_slice::<Response>(body)
        .ok()?
        .error
        .map(|e| e.code)
}

/// The answer to a forwarded request: JSON when it comes within `window` with
/// nothing related before it, else an SSE stream of the related messages and the
/// answer. No event ids: 2026-07-28 streams are not resumable. Dropping the body
/// (the client closed the stream) drops `rx`, which cancels the call.
async fn respond(
    mut rx: mpsc::Receiver<Outbound>,
    window: Duration,
    keep_alive: Duration,
    st: &AppState,
) -> Response {
    let first = match tokio::time::timeout(window, rx.recv()).await {
        Ok(Some(Outbound::Final(body))) => {
            st.metrics.bytes_out.inc_by(body.len() as u64);
            return answer(body.to_bytes());
        }
        Ok(Some(m)) => Some(m),
        Ok(None) | Err(_) => None,
    };
    struct State {
        first: Option<Outbound>,
        rx: mpsc::Receiver<Outbound>,
        tick: tokio::time::Interval,
        done: bool,
        metrics: Arc<crate::metrics::Metrics>,
    }
    let mut tick = interval_at(Instant::now() + keep_alive, keep_alive);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        first,
        rx,
        tick,
        done: false,
        metrics: st.metrics.clone(),
    };
    let body = stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let next = match s.first.take() {
            Some(m) => m,
            None => tokio::select! {
                m = s.rx.recv() => m?,
                _ = s.tick.tick() => {
                    return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), s));
                }
            },
        };
        s.tick.reset();
        let data = match next {
            Outbound::Message(b) => b,
            Outbound::Final(b) => {
                s.done = true;
                b.to_bytes()
            }
        };
        let mut frame = Vec::with_capacity(data.len() + 8);
        frame.extend_from_slice(b"data: ");
        frame.extend_from_slice(&data);
        frame.extend_from_slice(b"\n\n");
        s.metrics.bytes_out.inc_by(frame.len() as u64);
        Some((Ok::<Bytes, std::io::Error>(Bytes::from(frame)), s))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// 405 with `Allow: POST` for a GET or DELETE from a 2026-07-28 client (no
/// `Mcp-Session-Id`, a modern `MCP-Protocol-Version`): the revision has no GET
/// stream and no sessions (MCP 2026-07-28 streamable-http, earlier revisions).
pub fn refuse_get_or_delete(h: &HeaderMap) -> Option<HttpError> {
    if h.contains_key(SESSION_ID) {
        return None;
    }
    let modern = h
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_modern);
    modern.then(|| {
        HttpError::new(
            Rejection::MethodNotAllowed,
            StatusCode::METHOD_NOT_ALLOWED,
            jsonrpc::TRANSPORT_ERROR,
            "Method Not Allowed: 2026-07-28 has no GET stream and no sessions; POST requests",
        )
        .with_header(header::ALLOW, HeaderValue::from_static("POST"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Message {
        jsonrpc::parse_message(text.as_bytes()).unwrap()
    }

    fn with_version(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(PROTOCOL_VERSION, HeaderValue::from_str(v).unwrap());
        h
    }

    /// The cross product of method × claim × version header × session header.
    #[test]
    fn classifies_by_the_body_first() {
        let methods = [
            "initialize",
            "tools/call",
            "server/discover",
            "ping",
            "notifications/cancelled",
        ];
        let headers = [None, Some("2025-11-25"), Some("2026-07-28"), Some("v999")];
        for method in methods {
            let notification = method.starts_with("notifications/");
            let id = if notification { "" } else { r#""id":1,"# };
            for claimed in [false, true] {
                let params = if claimed {
                    r#","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
                } else {
                    ""
                };
                let m = msg(&format!(
                    r#"{{"jsonrpc":"2.0",{id}"method":"{method}"{params}}}"#
                ));
                for version in headers {
                    for session in [false, true] {
                        let mut h = version.map(with_version).unwrap_or_default();
                        if session {
                            h.insert(SESSION_ID, HeaderValue::from_static("abc"));
                        }
                        let want = if claimed || version == Some("2026-07-28") {
                            Era::Modern
                        } else {
                            Era::Legacy
                        };
                        assert_eq!(
                            era_of(&m, &h),
                            want,
                            "{method} claim={claimed} {version:?} session={session}"
                        );
                    }
                }
            }
        }
        let response = msg(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(era_of(&response, &with_version("2026-07-28")), Era::Legacy);
    }
}
