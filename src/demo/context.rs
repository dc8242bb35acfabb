//! What a handler can do while serving one request: progress, logs, and asking the
//! client for input (server→client requests on a session, MRTR rounds on a
//! stateless 2026-07-28 request).

use std::sync::Arc;

use mcpgate::jsonrpc::{self, ErrorObject, INTERNAL_ERROR, Id, METHOD_NOT_FOUND};
use mcpgate::mcp::{LogLevel, Method};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::demo::modern::Stateless;
use crate::demo::server::{CLIENT_REQUEST_TIMEOUT, Route, Server, Sink, lock};
use crate::demo::session::SessionInner;

/// The context of one client request, handed to every tool, resource and prompt handler.
///
/// Messages sent through it are *related* to the request ([`Route::Related`]): over
/// Streamable HTTP they travel on the request's SSE stream, before its response.
/// Cancellation (client `notifications/cancelled`, a closed stream or session end)
/// drops the handler's future.
#[derive(Clone)]
pub struct CallContext {
    session: Arc<SessionInner>,
    request_id: Id,
    progress_token: Option<Value>,
    cancel: CancellationToken,
    /// A 2026-07-28 request: what it declared; `None` on a session.
    stateless: Option<Arc<Stateless>>,
}

impl CallContext {
    pub(crate) fn new(
        session: Arc<SessionInner>,
        request_id: Id,
        progress_token: Option<Value>,
        cancel: CancellationToken,
        stateless: Option<Arc<Stateless>>,
    ) -> Self {
        CallContext {
            session,
            request_id,
            progress_token,
            cancel,
            stateless,
        }
    }

    /// Whether this is a stateless (2026-07-28) request rather than one of a session.
    pub fn is_stateless(&self) -> bool {
        self.stateless.is_some()
    }

    /// The id of the request being served.
    pub fn request_id(&self) -> &Id {
        &self.request_id
    }

    /// Where this request's related messages go, for what outlives a handler's
    /// own sends (a `subscriptions/listen` stream).
    pub(crate) fn related_sink(&self) -> (Arc<dyn Sink>, Route) {
        (
            self.session.sink.clone(),
            Route::Related(self.request_id.clone()),
        )
    }

    /// Whether the client declared capability `name` (`sampling`, `elicitation`,
    /// `roots`, …): in this request's `_meta` when stateless, at `initialize` on a
    /// session.
    pub fn declares(&self, name: &str) -> bool {
        match &self.stateless {
            Some(s) => s.capabilities.get(name).is_some_and(Value::is_object),
            None => self
                .session
                .state()
                .client_capabilities
                .get(name)
                .is_some_and(Value::is_object),
        }
    }

    /// Whether this round of a stateless request came with a `requestState` this
    /// server issued and verified (always `false` on a session).
    pub fn state_verified(&self) -> bool {
        self.stateless
            .as_ref()
            .and_then(|s| s.round.as_ref())
            .is_some_and(|r| r.verified())
    }

    pub(crate) fn session(&self) -> &Arc<SessionInner> {
        &self.session
    }

    /// The server, e.g. to change the catalogue or announce resource updates.
    pub fn server(&self) -> Server {
        self.session.server.clone()
    }

    /// Sends a notification related to this request.
    pub(crate) fn notify(&self, method: &Method, params: &Value) {
        let msg = jsonrpc::notification_bytes(method.as_str(), Some(params));
        self.session
            .sink
            .send(&Route::Related(self.request_id.clone()), msg);
    }

    /// Sends `notifications/progress` if the client gave a progress token; otherwise does
    /// nothing. `progress` must increase from call to call (MCP 2025-11-25
    /// basic/utilities/progress).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = json!({ "progressToken": token, "progress": number(progress) });
        if let Some(total) = total {
            params["total"] = number(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        self.notify(&Method::Progress, &params);
    }

    /// Sends `notifications/message` if `level` passes the session's
    /// `logging/setLevel` (every level without one), or on a stateless request
    /// the request's `logLevel` (nothing without one: MCP 2026-07-28
    /// server/utilities/logging).
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        let wanted = match &self.stateless {
            Some(s) => s.log_level.is_some_and(|min| level >= min),
            None => self
                .session
                .state()
                .log_level
                .is_none_or(|min| level >= min),
        };
        if wanted {
            let msg = log_message(level, logger, data);
            self.session
                .sink
                .send(&Route::Related(self.request_id.clone()), msg);
        }
    }

    /// Asks the client for input (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`) and returns its answer: [`input`](Self::input) under a key
    /// numbered in the order of the handler's asks (`input_1`, `input_2`, …).
    pub async fn request(&self, method: Method, params: Value) -> Result<Value, ErrorObject> {
        let key = match self.stateless.as_ref().and_then(|s| s.round.as_ref()) {
            Some(round) => round.next_key(),
            None => String::new(),
        };
        self.input(&key, method, params).await
    }

    /// Asks the client for input under `key` and returns its answer.
    ///
    /// On a session: a server→client request related to this request, which fails
    /// with `-32601` if the client did not declare the matching capability and with
    /// `-32603` on timeout, cancellation or session end (the client is then told
    /// with `notifications/cancelled`); `key` is not used.
    ///
    /// On a stateless request: an MRTR ask (`mcpgate::demo::mrtr`): this round's
    /// answer under `key` (`-32602` if it has not the result's shape), else the
    /// request ends with `input_required` (or `-32021` for a capability the request
    /// did not declare) and this never returns. `-32603` on a method that cannot
    /// carry `input_required` (only `tools/call`, `prompts/get`, `resources/read` can).
    pub async fn input(
        &self,
        key: &str,
        method: Method,
        params: Value,
    ) -> Result<Value, ErrorObject> {
        let Some(stateless) = &self.stateless else {
            let route = Route::Related(self.request_id.clone());
            return send_request(&self.session, route, &method, &params, &self.cancel).await;
        };
        let Some(round) = &stateless.round else {
            return Err(ErrorObject::new(
                INTERNAL_ERROR,
                format!("{method} cannot be asked for while serving this method"),
            ));
        };
        round
            .ask(key, &method, params, &stateless.capabilities)
            .await
    }

    /// Closes the connection carrying this request's SSE stream without ending the stream,
    /// so that the client reconnects with `Last-Event-ID` (MCP 2025-11-25 basic/transports,
    /// SEP-1699 polling). A no-op on stdio.
    pub fn close_stream(&self) {
        self.session.sink.close_stream(&self.request_id);
    }
}

/// A JSON number, written as an integer when the value is integral (`50`, not `50.0`).
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

fn log_message(level: LogLevel, logger: Option<&str>, data: Value) -> Vec<u8> {
    let mut params = Map::new();
    params.insert("level".into(), json!(level.as_str()));
    if let Some(logger) = logger {
        params.insert("logger".into(), json!(logger));
    }
    params.insert("data".into(), data);
    jsonrpc::notification_bytes(Method::LogMessage.as_str(), Some(&Value::Object(params)))
}

/// Forgets an outstanding server→client request however the wait ends; if it ended
/// without an answer, tells the client with `notifications/cancelled`.
struct Pending<'a> {
    session: &'a SessionInner,
    id: Id,
    route: Route,
    answered: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let was_pending = lock(&self.session.pending).remove(&self.id).is_some();
        if !self.answered && was_pending && !self.session.closed.is_cancelled() {
            let params =
                json!({ "requestId": self.id.to_value(), "reason": "request abandoned by server" });
            let msg = jsonrpc::notification_bytes(Method::Cancelled.as_str(), Some(&params));
            self.session.sink.send(&self.route, msg);
        }
    }
}

async fn send_request(
    session: &Arc<SessionInner>,
    route: Route,
    method: &Method,
    params: &Value,
    cancel: &CancellationToken,
) -> Result<Value, ErrorObject> {
    if let Some(cap) = method.client_capability() {
        let declared = session
            .state()
            .client_capabilities
            .get(cap)
            .is_some_and(Value::is_object);
        if !declared {
            return Err(ErrorObject::new(
                METHOD_NOT_FOUND,
                format!("Client does not support {method} (no `{cap}` capability)"),
            ));
        }
    }
    let id = session.next_request_id();
    let (tx, rx) = oneshot::channel();
    lock(&session.pending).insert(id.clone(), tx);
    let mut guard = Pending {
        session,
        id: id.clone(),
        route: route.clone(),
        answered: false,
    };
    session.sink.send(
        &route,
        jsonrpc::request_bytes(&id, method.as_str(), Some(params)),
    );
    tokio::select! {
        answer = rx => {
            guard.answered = true;
            answer.unwrap_or_else(|_| Err(ErrorObject::new(INTERNAL_ERROR, "Session closed")))
        }
        () = tokio::time::sleep(CLIENT_REQUEST_TIMEOUT) => {
            Err(ErrorObject::new(INTERNAL_ERROR, format!("Client did not answer {method} in time")))
        }
        () = cancel.cancelled() => Err(ErrorObject::new(INTERNAL_ERROR, "Request cancelled")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_numbers_stay_integers() {
        assert_eq!(number(50.0), json!(50));
        assert_eq!(number(0.5), json!(0.5));
        assert_eq!(number(-3.0), json!(-3));
    }
}
