//! What a handler can do while serving one request: progress, logs, server→client requests.

use std::str::FromStr;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::demo::server::{Route, Server, lock};
use crate::demo::session::SessionInner;
use mcpgate::jsonrpc::{self, ErrorObject, INTERNAL_ERROR, Id, METHOD_NOT_FOUND};

/// Syslog severities used by `notifications/message` (MCP 2025-11-25
/// server/utilities/logging), least severe first so that `Ord` compares severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`
    Info,
    /// `notice`
    Notice,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `alert`
    Alert,
    /// `emergency`
    Emergency,
}

impl LogLevel {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// An unknown log level name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log level {0:?}")]
pub struct UnknownLogLevel(pub String);

impl FromStr for LogLevel {
    type Err = UnknownLogLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "alert" => LogLevel::Alert,
            "emergency" => LogLevel::Emergency,
            other => return Err(UnknownLogLevel(other.to_owned())),
        })
    }
}

/// The context of one client request, handed to every tool, resource and prompt handler.
///
/// Messages sent through it are *related* to the request ([`Route::Related`]): over
/// Streamable HTTP they travel on the request's SSE stream, before its response.
/// Cancellation (client `notifications/cancelled` or session end) drops the handler's
/// future.
#[derive(Clone)]
pub struct RequestContext {
    session: Arc<SessionInner>,
    request_id: Id,
    progress_token: Option<Value>,
    cancel: CancellationToken,
}

impl RequestContext {
    pub(crate) fn new(
        session: Arc<SessionInner>,
        request_id: Id,
        progress_token: Option<Value>,
        cancel: CancellationToken,
    ) -> Self {
        RequestContext {
            session,
            request_id,
            progress_token,
            cancel,
        }
    }

    pub(crate) fn session(&self) -> &Arc<SessionInner> {
        &self.session
    }

    /// The server, e.g. to change the catalogue or announce resource updates.
    pub fn server(&self) -> Server {
        self.session.server.clone()
    }

    /// Sends a notification related to this request.
    pub fn notify(&self, method: &str, params: Value) {
        let msg = notification(method, Some(params));
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
        self.notify("notifications/progress", params);
    }

    /// Sends `notifications/message` if `level` passes the session's `logging/setLevel`.
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if let Some(msg) = log_message(&self.session, level, logger, data) {
            self.session
                .sink
                .send(&Route::Related(self.request_id.clone()), msg);
        }
    }

    /// Sends a server→client request related to this request (`sampling/createMessage`,
    /// `elicitation/create`, `roots/list`) and waits for the client's answer.
    ///
    /// Fails with `-32601` if the client did not declare the matching capability, and
    /// with `-32603` on timeout, cancellation or session end; in those last cases the
    /// client is told with `notifications/cancelled`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        let route = Route::Related(self.request_id.clone());
        send_request(&self.session, route, method, params, &self.cancel).await
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

fn log_message(
    session: &SessionInner,
    level: LogLevel,
    logger: Option<&str>,
    data: Value,
) -> Option<Vec<u8>> {
    if session.state().log_level.is_some_and(|min| level < min) {
        return None;
    }
    let mut params = Map::new();
    params.insert("level".into(), json!(level.as_str()));
    if let Some(logger) = logger {
        params.insert("logger".into(), json!(logger));
    }
    params.insert("data".into(), data);
    Some(notification(
        "notifications/message",
        Some(Value::Object(params)),
    ))
}

/// Serializes a notification, taking ownership of its params.
fn notification(method: &str, params: Option<Value>) -> Vec<u8> {
    let mut msg = Map::new();
    msg.insert("jsonrpc".into(), json!("2.0"));
    msg.insert("method".into(), json!(method));
    if let Some(params) = params {
        msg.insert("params".into(), params);
    }
    serde_json::to_vec(&Value::Object(msg)).unwrap_or_default()
}

/// The client capability a server→client method needs (MCP 2025-11-25 client/*).
fn required_capability(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
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
            let msg = jsonrpc::notification_bytes("notifications/cancelled", Some(&params));
            self.session.sink.send(&self.route, msg);
        }
    }
}

async fn send_request(
    session: &Arc<SessionInner>,
    route: Route,
    method: &str,
    params: Value,
    cancel: &CancellationToken,
) -> Result<Value, ErrorObject> {
    if let Some(cap) = required_capability(method) {
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
    session
        .sink
        .send(&route, jsonrpc::request_bytes(&id, method, Some(&params)));
    let timeout = session.server.options().client_request_timeout;
    tokio::select! {
        answer = rx => {
            guard.answered = true;
            answer.unwrap_or_else(|_| Err(ErrorObject::new(INTERNAL_ERROR, "Session closed")))
        }
        () = tokio::time::sleep(timeout) => {
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

    #[test]
    fn log_levels_order_by_severity() {
        assert!(LogLevel::Debug < LogLevel::Info);
        assert!(LogLevel::Warning < LogLevel::Emergency);
        for name in [
            "debug",
            "info",
            "notice",
            "warning",
            "error",
            "critical",
            "alert",
            "emergency",
        ] {
            assert_eq!(name.parse::<LogLevel>().map(LogLevel::as_str), Ok(name));
        }
        assert!("verbose".parse::<LogLevel>().is_err());
    }
}
