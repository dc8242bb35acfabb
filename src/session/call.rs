//! One host request being served by a backend ([`HostCall`]): where its related
//! messages and its response go, and which upstream request it became, so a
//! host's `notifications/cancelled` reaches it (MCP 2025-11-25
//! basic/utilities/cancellation).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::Host;
use crate::backend::{Caller, Connection};
use crate::jsonrpc::ErrorObject;
use crate::jsonrpc::{Encoded, Id};
use crate::mcp::Method;
use crate::streamable_http::ParamHeaders;

/// A server→client request a backend sent during a 2026-07-28 host's call. Such a
/// host never receives a JSON-RPC request: the gateway answers it
/// `input_required` instead and the backend request waits for its retry (MCP
/// 2026-07-28 basic/patterns/mrtr; the bridge is `dispatch/bridge.rs`).
#[derive(Debug)]
pub struct Ask {
    /// `sampling/createMessage`, `elicitation/create` or `roots/list`.
    pub method: Method,
    /// Its params, as the host will see them.
    pub params: Option<Value>,
    /// The backend connection that asked.
    pub conn: Weak<Connection>,
    /// The backend's id for the request.
    pub upstream_id: Id,
}

/// A message for a host: one serialized JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A notification or request related to the host request (goes before the
    /// response on its stream).
    Message(Bytes),
    /// The response that ends the host request's stream (in pieces when it
    /// carries a large backend result: [`Encoded`]).
    Final(Encoded),
}

/// One host request being served by a backend.
pub struct HostCall {
    /// Who asked: a legacy session or a modern request.
    pub host: Host,
    /// The host's id for the request.
    pub id: Id,
    /// The progress token of the host request being answered, if it asked for
    /// progress: a 2026-07-28 retry after `input_required` is a request of its
    /// own, with a token of its own ([`HostCall::rebind`]).
    progress_token: Mutex<Option<Value>>,
    /// Where related messages and the response go: one HTTP response stream per
    /// round of a 2026-07-28 call answered `input_required` and retried.
    sink: Mutex<mpsc::Sender<Outbound>>,
    upstream: Mutex<Option<(Weak<Connection>, u64)>>,
    asks: Mutex<Vec<Ask>>,
    asked: Notify,
    last_progress: Mutex<Option<f64>>,
    /// Set for the calls that may answer `input_required`.
    may_ask: AtomicBool,
    /// Cancelled by the host (or the gateway on its behalf).
    cancelled: CancellationToken,
    /// The host request's trace, continued by the upstream request.
    trace: Option<opentelemetry::Context>,
    /// The called tool's `x-mcp-header` annotations ([`Caller::param_headers`]).
    param_headers: Option<Arc<ParamHeaders>>,
}

impl HostCall {
    /// A call whose messages go to `sink`.
    pub fn new(
        host: Host,
        id: Id,
        progress_token: Option<Value>,
        sink: mpsc::Sender<Outbound>,
    ) -> Self {
        HostCall {
            host,
            id,
            progress_token: Mutex::new(progress_token),
            sink: Mutex::new(sink),
            upstream: Mutex::new(None),
            asks: Mutex::new(Vec::new()),
            asked: Notify::new(),
            may_ask: AtomicBool::new(false),
            last_progress: Mutex::new(None),
            cancelled: CancellationToken::new(),
            trace: None,
            param_headers: None,
        }
    }

    /// The call is to a tool with these `x-mcp-header` annotations.
    pub fn with_param_headers(mut self, headers: Option<Arc<ParamHeaders>>) -> Self {
        self.param_headers = headers;
        self
    }

    /// The call continues trace `trace` upstream ([`Caller::trace_parent`]).
    pub fn with_trace(mut self, trace: Option<opentelemetry::Context>) -> Self {
        self.trace = trace;
        self
    }

    /// Marks the call cancelled by the host. Returns the upstream request it
    /// became, if any, so the caller can cancel that too. A request started after
    /// this gives up by itself ([`Caller::started`] answers `false`).
    pub fn mark_cancelled(&self) -> Option<(Arc<Connection>, u64)> {
        self.cancelled.cancel();
        self.upstream()
    }

    /// Whether the host cancelled this call.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    /// Resolves when the call is cancelled ([`HostCall::mark_cancelled`]): what
    /// waits between upstream requests (the legacy→modern shim waiting for the
    /// host's answers) stops there.
    pub async fn cancelled(&self) {
        self.cancelled.cancelled().await;
    }

    /// The upstream request, if it is still known.
    pub fn upstream(&self) -> Option<(Arc<Connection>, u64)> {
        let u = self.upstream.lock().ok()?;
        let (conn, id) = u.as_ref()?;
        Some((conn.upgrade()?, *id))
    }

    /// Accepts a progress value only if it increases (MCP basic/utilities/progress:
    /// progress MUST increase with each notification).
    pub fn accept_progress(&self, progress: f64) -> bool {
        let Ok(mut last) = self.last_progress.lock() else {
            return false;
        };
        if last.is_some_and(|l| progress <= l) {
            return false;
        }
        *last = Some(progress);
        true
    }

    /// Sends a related message to the host (dropped, and counted, if the host is
    /// not reading).
    pub fn send_related(&self, msg: Bytes) -> bool {
        let Some(sink) = self.sink() else {
            return false;
        };
        let sent = sink.try_send(Outbound::Message(msg));
        if matches!(sent, Err(mpsc::error::TrySendError::Full(_))) {
            tracing::debug!("host call queue full; related message dropped");
            if let Some(session) = self.host.session() {
                session.events().count_drop();
            }
        }
        sent.is_ok()
    }

    /// Resolves when nothing reads this call's messages any more: for a modern
    /// host, its response stream closed, which cancels the call (MCP 2026-07-28
    /// basic/patterns/cancellation). A legacy call's messages are read into the
    /// session's event log, which outlives a disconnect.
    pub async fn host_gone(&self) {
        if let Some(sink) = self.sink() {
            sink.closed().await;
        }
    }

    /// Sends the response (of this round); returns false if the host no longer
    /// listens.
    pub async fn finish(&self, msg: Encoded) -> bool {
        let Some(sink) = self.sink() else {
            return false;
        };
        sink.send(Outbound::Final(msg)).await.is_ok()
    }

    /// The sink of the current round.
    fn sink(&self) -> Option<mpsc::Sender<Outbound>> {
        self.sink.lock().ok().map(|s| s.clone())
    }

    /// A new round of the call (a retry with `inputResponses`): its messages go
    /// to `sink` from now on, and its progress carries `progress_token`, the
    /// retry's own (none: the retry asked for no progress, and gets none). MCP
    /// 2026-07-28 basic/patterns/mrtr: the retry is a new request; a progress
    /// notification names the request that asked for it.
    pub fn rebind(&self, sink: mpsc::Sender<Outbound>, progress_token: Option<Value>) {
        if let Ok(mut s) = self.sink.lock() {
            *s = sink;
        }
        if let Ok(mut t) = self.progress_token.lock() {
            *t = progress_token;
        }
    }

    /// The progress token of the host request being answered, if it asked for
    /// progress.
    pub fn progress_token(&self) -> Option<Value> {
        self.progress_token.lock().ok().and_then(|t| t.clone())
    }

    /// Lets backend requests be put to the host as `input_required` (a
    /// 2026-07-28 `tools/call`, `resources/read` or `prompts/get`).
    pub fn allow_asks(&self) {
        self.may_ask.store(true, Ordering::Release);
    }

    /// Whether [`HostCall::allow_asks`] was called.
    pub fn may_ask(&self) -> bool {
        self.may_ask.load(Ordering::Acquire)
    }

    /// Queues a backend's server→client request for the host's next
    /// `input_required` answer and wakes the call's forward task.
    pub fn ask(&self, ask: Ask) {
        if let Ok(mut a) = self.asks.lock() {
            a.push(ask);
        }
        self.asked.notify_one();
    }

    /// Resolves when a backend request is queued with [`HostCall::ask`] (at once
    /// if one is queued already). A wake-up with nothing queued is not one: asks
    /// that came while nobody waited (gathered into the previous round) leave a
    /// stored permit behind, which must not end the next round empty.
    pub async fn asked(&self) {
        loop {
            if self.asks.lock().is_ok_and(|a| !a.is_empty()) {
                return;
            }
            self.asked.notified().await;
        }
    }

    /// Takes the queued backend requests.
    pub fn take_asks(&self) -> Vec<Ask> {
        self.asks
            .lock()
            .map(|mut a| std::mem::take(&mut *a))
            .unwrap_or_default()
    }

    /// Sends the response and waits, at most `limit`, until its stream took it
    /// (the JSON answer or the SSE pump let go of the call's queue), so closing
    /// the session right after cannot cut the response off.
    pub async fn finish_flushed(&self, msg: Bytes, limit: std::time::Duration) -> bool {
        let sent = self.finish(msg.into()).await;
        if let Some(sink) = self.sink() {
            let _ = tokio::time::timeout(limit, sink.closed()).await;
        }
        sent
    }
}

impl Caller for HostCall {
    fn wants_progress(&self) -> bool {
        self.progress_token().is_some()
    }

    fn log_level(&self) -> Option<crate::mcp::LogLevel> {
        self.host.log_level()
    }

    /// The host's declared capabilities that the gateway can carry back to it
    /// (`mcp::input::carried_capabilities`): a legacy session always can receive
    /// requests on its POST's SSE stream (every POST accepts one), a modern
    /// request through `input_required`.
    fn client_capabilities(&self) -> Option<Value> {
        let caps = self.host.client_capabilities();
        Some(crate::mcp::input::carried_capabilities(
            caps,
            self.host.version(),
        ))
    }

    fn param_headers(&self) -> Option<Arc<ParamHeaders>> {
        self.param_headers.clone()
    }

    fn started(&self, conn: &Arc<Connection>, id: u64) -> bool {
        if let Ok(mut u) = self.upstream.lock() {
            *u = Some((Arc::downgrade(conn), id));
        }
        // A host cancel that came before the line above found no upstream
        // request to cancel; it set the flag instead.
        !self.is_cancelled()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn trace_parent(&self) -> Option<opentelemetry::Context> {
        self.trace.clone()
    }
}

/// A server→client request sent to the host and not yet answered: where its
/// answer goes.
pub enum ClientRequest {
    /// Relayed from a backend: the answer goes back to that backend request.
    Backend {
        /// The backend connection that asked.
        conn: Weak<Connection>,
        /// The backend's own id for the request.
        upstream_id: Id,
    },
    /// Asked by the gateway itself, for a 2026-07-28 backend's `input_required`
    /// (the legacy→modern shim, `dispatch/shim.rs`): the answer (the host's
    /// result, or its error) goes to the call waiting for it. Dropped unanswered
    /// when the session ends.
    Gateway(tokio::sync::oneshot::Sender<HostAnswer>),
}

/// A host's answer to a server→client request: its result or its error.
pub type HostAnswer = Result<Value, ErrorObject>;
