//! One client's session: the per-connection protocol engine (requests, cancellation,
//! batches). A 2026-07-28 request (a `_meta` protocol version claim) is served
//! statelessly on whatever connection it arrives (`crate::demo::modern`).

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::FutureExt as _;
use futures_util::future::join_all;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use mcpgate::jsonrpc::{self, ErrorObject, INTERNAL_ERROR, INVALID_REQUEST, Id, Response};
use mcpgate::mcp::{LogLevel, Message, Method, Notification, ProtocolVersion, Request};

use crate::demo::context::CallContext;
use crate::demo::handlers;
use crate::demo::modern::{self, Stateless};
use crate::demo::mrtr;
use crate::demo::server::{Server, Sink, lock};

/// One client's session: negotiated version, client capabilities, log level,
/// subscriptions, in-flight requests and outstanding server→client requests.
///
/// Cheap to clone; [`Session::close`] ends it (everything in flight is cancelled).
#[derive(Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

/// State shared by a session and the contexts of its requests.
pub(crate) struct SessionInner {
    pub(crate) server: Server,
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) state: Mutex<SessionState>,
    in_flight: Mutex<HashMap<Id, CancellationToken>>,
    /// Server→client requests waiting for the client's response, by our id.
    pub(crate) pending: Mutex<HashMap<Id, oneshot::Sender<Result<Value, ErrorObject>>>>,
    next_id: AtomicI64,
    pub(crate) closed: CancellationToken,
}

/// Mutable per-session protocol state.
#[derive(Debug, Default)]
pub(crate) struct SessionState {
    /// Set by a successful `initialize`.
    pub(crate) protocol_version: Option<ProtocolVersion>,
    pub(crate) client_capabilities: Value,
    pub(crate) client_info: Value,
    /// `notifications/initialized` received.
    pub(crate) initialized: bool,
    /// `logging/setLevel`; `None` sends every level.
    pub(crate) log_level: Option<LogLevel>,
    pub(crate) subscriptions: HashSet<String>,
}

impl SessionInner {
    pub(crate) fn new(server: Server, sink: Arc<dyn Sink>) -> Self {
        SessionInner {
            server,
            sink,
            state: Mutex::new(SessionState::default()),
            in_flight: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(1),
            closed: CancellationToken::new(),
        }
    }

    pub(crate) fn next_request_id(&self) -> Id {
        Id::Num(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn is_initialized(&self) -> bool {
        lock(&self.state).protocol_version.is_some()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.state)
    }
}

/// Removes a finished request from the in-flight table, however its future ends.
struct InFlight<'a> {
    session: &'a SessionInner,
    id: Id,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(&self.session.in_flight).remove(&self.id);
    }
}

impl Session {
    pub(crate) fn from_inner(inner: Arc<SessionInner>) -> Self {
        Session { inner }
    }

    /// The negotiated protocol revision, once `initialize` succeeded.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.inner.state().protocol_version
    }

    /// Ids of the client requests still being handled.
    #[cfg(test)]
    fn in_flight(&self) -> Vec<Id> {
        lock(&self.inner.in_flight).keys().cloned().collect()
    }

    /// Handles one client request and returns the serialized response.
    ///
    /// A request whose `params._meta` claims a protocol version is served
    /// statelessly, after the validation ladder (`modern::validate`; its first
    /// failure is the answer). Returns `None` when the request was cancelled
    /// (`notifications/cancelled` or [`Session::close`]): the receiver then sends no
    /// response (MCP 2025-11-25 basic/utilities/cancellation). Dropping the returned
    /// future also stops the work.
    pub async fn handle_request(&self, req: Request) -> Option<Vec<u8>> {
        if !modern::claims(req.params.as_deref()) {
            return self.serve(req, None).await;
        }
        match modern::validate(&req) {
            Ok(stateless) => self.serve(req, Some(Arc::new(stateless))).await,
            Err(e) => Some(jsonrpc::error_bytes(Some(&req.id), &e)),
        }
    }

    /// Serves a 2026-07-28 request that already passed the validation ladder (over
    /// HTTP the transport climbs it, headers included).
    pub(crate) async fn handle_stateless(
        &self,
        req: Request,
        stateless: Stateless,
    ) -> Option<Vec<u8>> {
        self.serve(req, Some(Arc::new(stateless))).await
    }

    async fn serve(&self, req: Request, stateless: Option<Arc<Stateless>>) -> Option<Vec<u8>> {
        let id = req.id.clone();
        let token = self.inner.closed.child_token();
        {
            let mut in_flight = lock(&self.inner.in_flight);
            if in_flight.contains_key(&id) {
                let e = ErrorObject::new(INVALID_REQUEST, "Request id is already in use");
                return Some(jsonrpc::error_bytes(Some(&id), &e));
            }
            in_flight.insert(id.clone(), token.clone());
        }
        let _guard = InFlight {
            session: &self.inner,
            id: id.clone(),
        };
        let progress = jsonrpc::progress_token(req.params.as_deref()).cloned();
        let ctx = CallContext::new(
            self.inner.clone(),
            id.clone(),
            progress,
            token.clone(),
            stateless.clone(),
        );
        let method = req.method.clone();
        let handler = handlers::dispatch(ctx, req.method, req.params.as_deref().cloned());
        let round = stateless.as_ref().and_then(|s| s.round.as_ref());
        let work = async {
            match round {
                Some(round) => mrtr::run(round, handler).await,
                None => handler.await,
            }
        };
        let outcome = tokio::select! {
            biased;
            () = token.cancelled() => return None,
            outcome = AssertUnwindSafe(work).catch_unwind() => outcome,
        };
        let outcome = match (outcome, &stateless) {
            (Ok(Ok(result)), Some(_)) => {
                Ok(Ok(modern::complete(&method, result, &self.inner.server)))
            }
            (Ok(Err(error)), Some(_)) => Ok(Err(modern::shape_error(error))),
            (outcome, _) => outcome,
        };
        Some(match outcome {
            Ok(Ok(result)) => jsonrpc::result_value_bytes(&id, &result),
            Ok(Err(error)) => jsonrpc::error_bytes(Some(&id), &error),
            Err(_) => {
                tracing::error!(request = %id.logged(), "request handler panicked");
                let e = ErrorObject::new(INTERNAL_ERROR, "Internal error");
                jsonrpc::error_bytes(Some(&id), &e)
            }
        })
    }

    /// Handles one client notification (`initialized`, `cancelled`, …); unknown ones are ignored.
    pub fn handle_notification(&self, n: Notification) {
        match n.method {
            Method::Initialized => self.inner.state().initialized = true,
            Method::Cancelled => {
                let params = n.params.unwrap_or(Value::Null);
                let Some(id) = params.get("requestId").and_then(Id::from_value) else {
                    return;
                };
                let token = lock(&self.inner.in_flight).get(&id).cloned();
                if let Some(token) = token {
                    let reason = params.get("reason").and_then(Value::as_str).unwrap_or("");
                    tracing::debug!(request = %id.logged(), reason, "request cancelled by client");
                    token.cancel();
                }
            }
            other => tracing::debug!(method = %other, "notification ignored"),
        }
    }

    /// Delivers the client's response to a server→client request; unknown ids are ignored
    /// (the request may have timed out or been cancelled).
    pub fn handle_response(&self, r: Response) {
        let Some(id) = r.id else {
            tracing::warn!("client sent an error response without id");
            return;
        };
        let waiter = lock(&self.inner.pending).remove(&id);
        let Some(waiter) = waiter else {
            tracing::debug!(request = %id.logged(), "response to an unknown request ignored");
            return;
        };
        let outcome = r.outcome.and_then(|raw| {
            serde_json::from_str::<Value>(raw.get())
                .map_err(|e| ErrorObject::new(INTERNAL_ERROR, format!("bad result: {e}")))
        });
        let _ = waiter.send(outcome);
    }

    /// Handles a JSON-RPC batch (an array body). Batches exist only in 2025-03-26 (removed
    /// in 2025-06-18, MCP basic/index); other sessions get one `-32600` error. Returns the
    /// array of responses, or `None` when the batch held no requests.
    pub async fn handle_batch(&self, items: Vec<Box<RawValue>>) -> Option<Vec<u8>> {
        let reject = |msg: &str| {
            let e = ErrorObject::new(INVALID_REQUEST, msg);
            Some(jsonrpc::error_bytes(None, &e))
        };
        if !self
            .protocol_version()
            .is_some_and(ProtocolVersion::allows_batches)
        {
            return reject("JSON-RPC batches are not supported by this protocol revision");
        }
        if items.is_empty() {
            return reject("Empty batch");
        }
        let mut outputs = Vec::new();
        let mut requests = Vec::new();
        for raw in &items {
            match jsonrpc::classify_raw(raw) {
                Err(e) => outputs.push(jsonrpc::error_bytes(e.id(), &e.to_error_object())),
                Ok(Message::Request(r)) if r.method == Method::Initialize => {
                    let e = ErrorObject::new(INVALID_REQUEST, "initialize must not be batched");
                    outputs.push(jsonrpc::error_bytes(Some(&r.id), &e));
                }
                Ok(Message::Request(r)) if modern::claims(r.params.as_deref()) => {
                    let e =
                        ErrorObject::new(INVALID_REQUEST, "2026-07-28 requests are never batched");
                    outputs.push(jsonrpc::error_bytes(Some(&r.id), &e));
                }
                Ok(Message::Request(r)) => requests.push(self.handle_request(r)),
                Ok(Message::Notification(n)) => self.handle_notification(n),
                Ok(Message::Response(r)) => self.handle_response(r),
            }
        }
        outputs.extend(join_all(requests).await.into_iter().flatten());
        if outputs.is_empty() {
            return None;
        }
        let mut out = vec![b'['];
        for (i, o) in outputs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(o);
        }
        out.push(b']');
        Some(out)
    }

    /// Ends the session: cancels in-flight requests and fails outstanding server→client
    /// requests. Idempotent.
    pub fn close(&self) {
        self.inner.closed.cancel();
        lock(&self.inner.pending).clear();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use mcpgate::mcp::Changed;

    use crate::demo::catalog::{DemoCatalog, Tool, text_result};
    use crate::demo::server::{Route, ServerInfo};

    struct Capture(Mutex<Vec<(Route, Value)>>);

    impl Sink for Capture {
        fn send(&self, route: &Route, message: Vec<u8>) {
            let v = serde_json::from_slice(&message).unwrap_or(Value::Null);
            lock(&self.0).push((route.clone(), v));
        }
    }

    fn server() -> Server {
        let info = ServerInfo {
            name: "t".into(),
            version: "0".into(),
            title: None,
            instructions: None,
        };
        let catalog = DemoCatalog::new().with_tool(Tool::new(
            json!({"name": "wait", "inputSchema": {"type": "object"}}),
            |_, _| async move {
                // Ends only when cancellation drops this future.
                std::future::pending::<()>().await;
                Ok(text_result("never"))
            },
        ));
        Server::new(info, catalog)
    }

    fn req(id: i64, method: &str, params: Value) -> Request {
        Request {
            id: Id::Num(id),
            method: Method::parse(method),
            params: Some(params.into()),
        }
    }

    async fn init(s: &Session) -> Value {
        let init = req(
            0,
            "initialize",
            json!({"protocolVersion": "2024-01-01", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
        );
        let out = s.handle_request(init).await.unwrap_or_default();
        serde_json::from_slice(&out).unwrap_or(Value::Null)
    }

    #[tokio::test]
    async fn negotiates_and_gates_on_initialize() {
        let capture = Arc::new(Capture(Mutex::new(Vec::new())));
        let s = server().connect(capture.clone());
        let early = s.handle_request(req(9, "tools/list", json!({}))).await;
        let early: Value = serde_json::from_slice(&early.unwrap_or_default()).unwrap_or_default();
        assert_eq!(early["error"]["code"], INVALID_REQUEST);
        let r = init(&s).await;
        assert_eq!(
            r["result"]["protocolVersion"],
            ProtocolVersion::LATEST.as_str()
        );
        assert_eq!(r["result"]["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(s.protocol_version(), Some(ProtocolVersion::LATEST));
        let again = init(&s).await;
        assert_eq!(again["error"]["code"], INVALID_REQUEST);
    }

    #[tokio::test]
    async fn cancellation_suppresses_the_response() {
        let s = server().connect(Arc::new(Capture(Mutex::new(Vec::new()))));
        init(&s).await;
        let call = req(5, "tools/call", json!({"name": "wait"}));
        let s2 = s.clone();
        let task = tokio::spawn(async move { s2.handle_request(call).await });
        while s.in_flight().is_empty() {
            tokio::task::yield_now().await;
        }
        s.handle_notification(Notification {
            method: Method::Cancelled,
            params: Some(json!({"requestId": 5, "reason": "test"})),
        });
        assert_eq!(task.await.ok().flatten(), None);
        assert!(s.in_flight().is_empty());
    }

    #[tokio::test]
    async fn list_changed_reaches_initialized_sessions() {
        let srv = server();
        let capture = Arc::new(Capture(Mutex::new(Vec::new())));
        let s = srv.connect(capture.clone());
        init(&s).await;
        let changed = srv.update_catalog(|c| {
            c.remove_tool("wait");
        });
        assert_eq!(changed, vec![Changed::Tools]);
        let sent = lock(&capture.0).clone();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Route::Unrelated);
        assert_eq!(sent[0].1["method"], "notifications/tools/list_changed");
        assert!(srv.update_catalog(|_| {}).is_empty());
    }
}
