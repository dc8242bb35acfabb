//! `POST /mcp`: the frame phase of a host message (MCP 2025-11-25
//! basic/transports, Streamable HTTP, sending messages to the server), the
//! `initialize` handshake that opens a session, the frame and session phases of
//! 2025-03-26 batches (served by `batch.rs`), and the answer as one JSON body or
//! an SSE stream.
//!
//! Phases, in order: accept + authenticate (`accept.rs`), frame (Content-Type
//! 415, Accept 406, the JSON-RPC envelope 400), session (`session.rs`: 400/404),
//! route and forward (the dispatch), respond (`sse.rs`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::accept::{accept, decode_body, read_body};
use super::headers::{self, PostAccept};
use super::modern::{self, Era};
use super::session::{count_drops, lookup, record_new, reject, reserve_stream};
use super::sse::{Mirror, json_response, stream_reply};
use super::{AppState, HttpError};
use crate::auth::Principal;
use crate::config::ModernFace;
use crate::dispatch::Reply;
use crate::jsonrpc::{self, EnvelopeError, ErrorObject};
use crate::mcp::version::shape_capabilities;
use crate::mcp::{Message, Method, ProtocolVersion, Request as RpcRequest};
use crate::request::{Outcome, Rejection, RequestContext, request_span};
use crate::session::{Host, Identity, Session, SessionToken, StreamSlot};
use crate::streamable_http::SESSION_ID;

/// What the frame and session phases found in a POST body.
enum Framed {
    /// `initialize`: opens a session.
    Initialize(RpcRequest),
    /// A JSON-RPC batch (2025-03-26 sessions only); an element that is not a
    /// message is kept as its error, answered in place.
    Batch(Arc<Session>, Vec<Result<Message, EnvelopeError>>),
    /// One message for an existing session.
    One(Arc<Session>, Message),
    /// A 2026-07-28 message: stateless, served by `modern.rs`.
    Modern(Box<HeaderMap>, Message),
}

/// `POST /mcp`: one JSON-RPC message (or, for 2025-03-26 sessions, a batch).
/// A host that accepts only `text/event-stream` gets every answer as SSE.
pub async fn post(State(st): State<AppState>, req: Request) -> Response {
    // Read here, refused (406) in its place among the frame checks.
    let accept = headers::check_post_accept(req.headers());
    let sse_only = matches!(accept, Ok(PostAccept::EventStreamOnly));
    let resp = serve_post(st, req, accept).await;
    if sse_only {
        return super::sse::json_as_sse(resp).await;
    }
    resp
}

async fn serve_post(st: AppState, req: Request, accept: Result<PostAccept, HttpError>) -> Response {
    let mut ctx = super::accept::context(&st, &req);
    let (framed, principal) = match frame(&st, &mut ctx, req, accept).await {
        Ok(f) => f,
        Err(e) => return reject(ctx, e),
    };
    // The paths other than one request on a session are boxed: an async fn's
    // future is as large as its largest await point, and this one is moved
    // (copied) into a box by axum on every request.
    match framed {
        Framed::Initialize(req) => {
            match Box::pin(initialize(&st, &mut ctx, &req, principal.as_ref())).await {
                Ok((resp, outcome)) => {
                    ctx.finish(outcome);
                    resp
                }
                Err(e) => reject(ctx, e),
            }
        }
        Framed::Batch(session, items) => {
            st.supervisor.wait_loaded(modern::LOAD_WAIT).await;
            ctx.finish(Outcome::Ok);
            Box::pin(super::batch::serve(&st, &session, items)).await
        }
        Framed::One(session, Message::Notification(n)) => {
            st.relay.handle_notification(&session, &n);
            ctx.set_status(202);
            ctx.finish(Outcome::Ok);
            StatusCode::ACCEPTED.into_response()
        }
        Framed::One(session, Message::Response(r)) => {
            st.relay.handle_response(&session, r);
            ctx.set_status(202);
            ctx.finish(Outcome::Ok);
            StatusCode::ACCEPTED.into_response()
        }
        Framed::One(session, Message::Request(req)) => match reserve_stream(&st, &session) {
            Ok(slot) => {
                // A session restored from its id on a process that has just
                // started must not see a catalogue that is still loading
                // (`initialize` waits the same way; one atomic load once loaded).
                st.supervisor.wait_loaded(modern::LOAD_WAIT).await;
                answer(&st, ctx, &session, req, slot).await
            }
            Err(e) => reject(ctx, e),
        },
        Framed::Modern(h, msg) => Box::pin(modern::serve(&st, ctx, &h, msg, principal)).await,
    }
}

/// Accept, frame and session phases: the checked message and its session.
async fn frame(
    st: &AppState,
    ctx: &mut RequestContext,
    req: Request,
    admitted: Result<PostAccept, HttpError>,
) -> Result<(Framed, Option<Arc<Principal>>), HttpError> {
    let a = accept(st, req).await?;
    let h = &a.parts.headers;
    ctx.set_principal(a.principal.as_ref());
    let body = read_body(st, h, a.body).await?;
    ctx.set_bytes_in(body.len());
    let body = decode_body(st, h, body)?;
    headers::check_content_type(h)?;
    admitted?;
    let principal = a.principal;
    if body.trim_ascii_start().first() == Some(&b'[') {
        return frame_batch(st, ctx, h, &body, principal).await;
    }
    let msg = jsonrpc::parse_message(&body).map_err(|e| HttpError::envelope(&e))?;
    match &msg {
        Message::Request(r) => {
            ctx.set_request(&r.method);
            ctx.set_rpc_id(&r.id);
            ctx.start_trace(h, r);
        }
        Message::Notification(n) => ctx.set_notification(Some(&n.method)),
        Message::Response(_) => ctx.set_notification(None),
    }
    if modern::era_of(&msg, h) == Era::Modern {
        ctx.set_modern();
        if modern_served(st) {
            return Ok((Framed::Modern(Box::new(h.clone()), msg), principal));
        }
        if let Message::Request(req) = &msg {
            let requested = modern::claim(&msg)
                .and_then(Value::as_str)
                .unwrap_or("2026-07-28");
            return Err(modern_probe_refused(
                &req.id,
                &format!("revision {:?}", jsonrpc::clip(requested)),
            ));
        }
    } else {
        ctx.set_legacy();
    }
    let msg = match msg {
        Message::Request(req) if req.method == Method::Initialize => {
            headers::initialize_protocol_version(h)?;
            // MCP 2025-11-25 basic/transports, session management: a new
            // session starts with an initialize that carries no session id. One
            // naming a live session of this caller is refused rather than
            // opening a second session beside it; an id that names nothing
            // (the session ended: the host was told 404) does not stand in
            // the way of the new session.
            if headers::session_id(h).is_some()
                && lookup(st, h, principal.as_ref(), ctx.endpoint(), ctx.client())
                    .await
                    .is_ok()
            {
                return Err(HttpError::envelope(&EnvelopeError::Invalid {
                    id: Some(req.id),
                    reason: ALREADY_INITIALIZED.into(),
                }));
            }
            return Ok((Framed::Initialize(req), principal));
        }
        // A notification gets no answer (JSON-RPC 2.0 §4.1), so the host would
        // never learn its session: refused as any malformed message is.
        Message::Notification(n) if n.method == Method::Initialize => {
            return Err(invalid(
                "initialize is a request and needs an id (it was sent as a notification)",
            ));
        }
        msg => msg,
    };
    if let Message::Request(req) = &msg
        && req.method == Method::ServerDiscover
        && headers::session_id(h).is_none()
        && !modern_served(st)
    {
        return Err(modern_probe_refused(&req.id, "server/discover"));
    }
    let session = lookup(st, h, principal.as_ref(), ctx.endpoint(), ctx.client()).await?;
    ctx.set_session(session.log_id());
    ctx.set_revision(session.version());
    headers::protocol_version(h)?;
    session.touch();
    // Refused when an eviction of the never-used session won the race.
    if !matches!(msg, Message::Notification(_)) && !session.mark_used() {
        return Err(HttpError::unknown_session());
    }
    Ok((Framed::One(session, msg), principal))
}

/// The frame and session phases of a JSON-RPC batch (2025-03-26 hosts only; a
/// 2026-07-28 message is never part of one).
async fn frame_batch(
    st: &AppState,
    ctx: &mut RequestContext,
    h: &HeaderMap,
    body: &[u8],
    principal: Option<Arc<Principal>>,
) -> Result<(Framed, Option<Arc<Principal>>), HttpError> {
    let items = super::batch::parse(body)?;
    if items
        .iter()
        .any(|i| i.as_ref().is_ok_and(|m| modern::claim(m).is_some()))
    {
        return Err(invalid("a 2026-07-28 message is never part of a batch"));
    }
    // Without a session the batch can only be an attempt to open one: that is
    // what is wrong with it (2025-03-26 basic/lifecycle), not the missing id.
    if headers::session_id(h).is_none() && items.iter().any(is_initialize) {
        return Err(invalid(INITIALIZE_IN_BATCH));
    }
    ctx.set_legacy();
    let session = lookup(st, h, principal.as_ref(), ctx.endpoint(), ctx.client()).await?;
    ctx.set_session(session.log_id());
    ctx.set_revision(session.version());
    headers::protocol_version(h)?;
    if !session.version().allows_batches() {
        return Err(invalid(
            "JSON-RPC batches are not allowed in this protocol revision",
        ));
    }
    session.touch();
    if items
        .iter()
        .any(|i| matches!(i, Ok(Message::Request(_) | Message::Response(_))))
        && !session.mark_used()
    {
        return Err(HttpError::unknown_session());
    }
    Ok((Framed::Batch(session, items), principal))
}

/// 2025-03-26 basic/lifecycle: "The initialization phase MUST be the first
/// interaction" and its request MUST NOT be part of a JSON-RPC batch.
pub(super) const INITIALIZE_IN_BATCH: &str = "initialize must not be part of a batch";

/// Why an `initialize` that names a live session is refused (400, -32600).
const ALREADY_INITIALIZED: &str = "this session is already initialized: send initialize \
    without Mcp-Session-Id to open another session (DELETE this one when done with it)";

fn is_initialize(item: &Result<Message, EnvelopeError>) -> bool {
    match item {
        Ok(Message::Request(r)) => r.method == Method::Initialize,
        Ok(Message::Notification(n)) => n.method == Method::Initialize,
        _ => false,
    }
}

pub(super) fn invalid(reason: &'static str) -> HttpError {
    HttpError::envelope(&EnvelopeError::Invalid {
        id: None,
        reason: reason.into(),
    })
}

/// The route, forward and respond phases of a request on a session.
async fn answer(
    st: &AppState,
    ctx: RequestContext,
    session: &Arc<Session>,
    req: RpcRequest,
    slot: StreamSlot,
) -> Response {
    use tracing::Instrument;
    // With a shared store, a request for a per-session child another replica
    // owns runs there (boxed: rare, and large); an owned session skips this.
    let (ctx, req, slot) = if st.supervisor.shared().is_some()
        && !session.is_owned()
        && st.supervisor.has_owner_bound()
    {
        match Box::pin(super::owner::serve(st, ctx, session, req, slot)).await {
            Ok(resp) => return resp,
            Err(back) => back,
        }
    } else {
        (ctx, req, slot)
    };
    // One span per host request: routing fills in the backend and what the
    // request is about (`request::record_target`: tool, prompt or uri).
    let span = request_span(&req.id, &req.method, Some(&session.log_id()));
    let server = &st.server;
    let host = Host::Legacy(session.clone());
    let mirror = st.supervisor.shared().map(|store| Mirror {
        store: store.clone(),
        h: session.store_key().to_owned(),
        request_id: req.id.to_json(),
        sealer: st.sealer.clone(),
    });
    let reply = st.dispatch.handle(ctx, &host, req).instrument(span).await;
    match reply {
        Reply::Now(bytes) => {
            st.metrics.bytes_out.inc_by(bytes.len() as u64);
            json_response(bytes)
        }
        Reply::Stream(rx) => {
            let times = (server.json_response_window, server.sse_keep_alive);
            stream_reply(rx.into(), session, slot, times, &st.metrics, mirror).await
        }
        Reply::Call(call) => {
            let times = (server.json_response_window, server.sse_keep_alive);
            stream_reply(call, session, slot, times, &st.metrics, mirror).await
        }
    }
}

/// Whether the 2026-07-28 face is served (`[server] modern`): `native` serves it
/// only while every backend speaks 2026-07-28, which needs the modern client face
/// (not built yet), so it is off for now.
fn modern_served(st: &AppState) -> bool {
    st.server.modern == ModernFace::Bridge
}

/// The answer to a 2026-07-28 probe while this endpoint serves only the
/// session-based revisions: 400 with `-32000`, the request's `id`, and a message
/// naming the revisions served and `initialize`, e.g. `Bad Request:
/// server/discover is not served here; this endpoint serves 2025-11-25,
/// 2025-06-18, 2025-03-26: use initialize`.
///
/// Never a modern-era code (`-32020`…`-32022`): a client that recognizes one
/// takes it for a modern server and retries instead of falling back (MCP
/// 2026-07-28 basic/transports/streamable-http, Backward Compatibility); rmcp
/// 3.11 `Auto` then fails with `NoCompatibleProtocolVersion`.
fn modern_probe_refused(id: &jsonrpc::Id, what: &str) -> HttpError {
    let served: Vec<&str> = ProtocolVersion::HOST_SUPPORTED
        .iter()
        .map(|v| v.as_str())
        .collect();
    let mut e = HttpError::new(
        Rejection::ModernProbe,
        StatusCode::BAD_REQUEST,
        jsonrpc::TRANSPORT_ERROR,
        format!(
            "Bad Request: {what} is not served here; this endpoint serves {}: use initialize",
            served.join(", ")
        ),
    );
    e.detail.id = Some(Some(id.clone()));
    e
}

/// `initialize`: negotiates the revision, opens a session and answers with the
/// aggregated capabilities (MCP 2025-11-25 basic/lifecycle). The outcome is
/// `Error` for an `initialize` without a protocol version.
/// `Retry-After` (RFC 9110 §10.2.3, whole seconds) for an `initialize` refused at
/// the session cap: when the longest-idle session expires, the soonest a place
/// frees up without a `DELETE`; between 1 and 60 s.
pub(super) fn session_cap_retry_after(st: &AppState) -> HeaderValue {
    let ttl = st.server.session_idle_timeout;
    let now = tokio::time::Instant::now();
    let soonest = st
        .sessions
        .all()
        .iter()
        .filter(|s| !s.is_busy())
        .map(|s| (s.last_seen() + ttl).saturating_duration_since(now))
        .min()
        .unwrap_or(std::time::Duration::from_secs(60));
    HeaderValue::from(soonest.as_secs().clamp(1, 60))
}

async fn initialize(
    st: &AppState,
    ctx: &mut RequestContext,
    req: &RpcRequest,
    principal: Option<&Arc<Principal>>,
) -> Result<(Response, Outcome), HttpError> {
    if st.supervisor.is_stopping() {
        return Err(HttpError::draining());
    }
    let (requested, capabilities, client_info) = match initialize_params(req.params.as_deref()) {
        Ok(p) => p,
        Err(why) => {
            tracing::info!(id = %req.id.logged(), %why, "initialize refused: invalid params");
            let e = ErrorObject::new(jsonrpc::INVALID_PARAMS, format!("initialize: {why}"));
            let body: Bytes = jsonrpc::error_bytes(Some(&req.id), &e).into();
            ctx.set_bytes_out(body.len());
            return Ok((json_response(body), Outcome::Error));
        }
    };
    let version = ProtocolVersion::negotiate(requested);
    ctx.set_revision(version);
    let session = open_session(st, ctx, version, capabilities, client_info, principal).await?;
    let view = st.catalog.view_for_key(&session.view_key());
    let mut capabilities = view.capabilities.clone();
    shape_capabilities(&mut capabilities, version);
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")},
    });
    if let Some(text) = &view.instructions {
        result["instructions"] = text.clone().into();
    }
    tracing::info!(session = %session.log_id(), version = %version, "session started");
    ctx.set_session(session.log_id());
    let body: Bytes = jsonrpc::result_value_bytes(&req.id, &result).into();
    ctx.set_bytes_out(body.len());
    let mut resp = json_response(body);
    if let Ok(v) = HeaderValue::from_str(session.id()) {
        resp.headers_mut().insert(SESSION_ID, v);
    }
    Ok((resp, Outcome::Ok))
}

/// The `initialize` params a session is opened with: `protocolVersion` (a
/// string), `capabilities` (an object) and `clientInfo` (an object with string
/// `name` and `version`), all required, as MCP 2025-11-25 basic/lifecycle and its
/// schema (`InitializeRequestParams`, `ClientCapabilities`, `Implementation`)
/// type them; the official TypeScript and Python SDK servers refuse an
/// `initialize` without them too.
///
/// Errors: which field is missing or has the wrong type, e.g.
/// `params.capabilities must be an object, not a string` or `params.clientInfo
/// must be an object, not missing` (answered -32602 Invalid params).
fn initialize_params(params: Option<&Value>) -> Result<(&str, Value, Value), String> {
    let field = |name: &str| params.and_then(|p| p.get(name));
    let Some(requested) = field("protocolVersion").and_then(Value::as_str) else {
        return Err(wrong_type(
            "params.protocolVersion",
            "a string",
            field("protocolVersion"),
        ));
    };
    let capabilities = match field("capabilities") {
        Some(c) if c.is_object() => c.clone(),
        other => return Err(wrong_type("params.capabilities", "an object", other)),
    };
    let client_info = match field("clientInfo") {
        Some(Value::Object(info)) => {
            for key in ["name", "version"] {
                let v = info.get(key);
                if !v.is_some_and(Value::is_string) {
                    let name = format!("params.clientInfo.{key}");
                    return Err(wrong_type(&name, "a string", v));
                }
            }
            Value::Object(info.clone())
        }
        other => return Err(wrong_type("params.clientInfo", "an object", other)),
    };
    Ok((requested, capabilities, client_info))
}

/// `FIELD must be WANT, not TYPE` (`missing` when absent).
fn wrong_type(field: &str, want: &str, got: Option<&Value>) -> String {
    let got = match got {
        None => "missing",
        Some(Value::Null) => "null",
        Some(Value::Bool(_)) => "a boolean",
        Some(Value::Number(_)) => "a number",
        Some(Value::String(_)) => "a string",
        Some(Value::Array(_)) => "an array",
        Some(Value::Object(_)) => "an object",
    };
    format!("{field} must be {want}, not {got}")
}

/// Opens the session an `initialize` asked for: its sealed id, its record in the
/// shared store (awaited), its place in the store under the session cap.
///
/// Errors: 503 while the shared store does not answer, 503 + `Retry-After` at the
/// session cap and 429 + `Retry-After` at the client's share, when no
/// never-used session could be ended to make room (`admission.rs`).
async fn open_session(
    st: &AppState,
    ctx: &RequestContext,
    version: ProtocolVersion,
    capabilities: Value,
    client_info: Value,
    principal: Option<&Arc<Principal>>,
) -> Result<Arc<Session>, HttpError> {
    st.supervisor.wait_loaded(modern::LOAD_WAIT).await;
    let p = principal.map(|p| &**p);
    let endpoint = ctx.endpoint().clone();
    let key = st.catalog.view_key_at(&endpoint, p);
    let identity = Identity::mint(st.sessions.epoch());
    let token = SessionToken::new(
        &st.sealer,
        identity,
        p.map(Principal::id).as_ref(),
        version,
        &capabilities,
    );
    let id = token.seal(&st.sealer, &endpoint).into();
    let session = Session::new(id, identity, version, capabilities, client_info)
        .at_endpoint(endpoint)
        .opened_by(ctx.client());
    let session = Arc::new(session.with_principal(p, key));
    count_drops(st, &session);
    super::standalone::wire(st, &session);
    record_new(st, &session).await?;
    if let Err(e) = super::admission::admit(st, &session).await {
        if let Some(store) = st.supervisor.shared() {
            store.discard(session.store_key()).await;
        }
        return Err(e);
    }
    Ok(session)
}
