//! The two traits through which the client face meets the layer above it:
//! [`Caller`], the host request an upstream request serves, and
//! [`UpstreamHandler`], which receives what backends send on their own; and
//! [`Mirrored`], the body values a 2026-07-28 HTTP request repeats in headers.

use std::any::Any;
use std::sync::Arc;

use ::http::{HeaderName, HeaderValue};

use super::Connection;
use serde_json::Value;

use crate::mcp::{LogLevel, Method, Notification, Request};
use crate::streamable_http::ParamHeaders;

/// What a request to a 2026-07-28 HTTP backend mirrors from its body into
/// headers besides `Mcp-Method` (MCP 2026-07-28 basic/transports/streamable-http,
/// request metadata and custom headers). Empty toward legacy and stdio backends.
#[derive(Debug, Default)]
pub(crate) struct Mirrored {
    /// `Mcp-Name`: `params.name`, `params.uri` or `params.taskId`, the backend's own.
    pub name: Option<String>,
    /// `Mcp-Param-*`, by the backend's schema from the final arguments.
    pub params: Vec<(HeaderName, HeaderValue)>,
}

impl Mirrored {
    /// What a 2026-07-28 request of `method` with `params` mirrors: `Mcp-Name`,
    /// and the `Mcp-Param-*` of the called tool's annotations from the final
    /// arguments (fixed values injected; the route's annotations are the
    /// backend's own).
    pub(crate) fn new(method: &Method, params: Option<&Value>, call: Option<&dyn Caller>) -> Self {
        let params_headers = call
            .and_then(|c| c.param_headers())
            .map(|h| h.mirror(params.and_then(|p| p.get("arguments"))))
            .unwrap_or_default();
        Mirrored {
            name: super::modern::mcp_name(method, params),
            params: params_headers,
        }
    }
}

/// The caller of one upstream request, opaque to the client face (for the
/// gateway: the host request being served). The connection asks it what it needs
/// to send the request, and hands it back to the [`UpstreamHandler`] with every
/// message the backend relates to that request.
pub trait Caller: Send + Sync + 'static {
    /// Whether the request asks for progress: the upstream request then carries
    /// its upstream id as progress token (MCP basic/utilities/progress).
    fn wants_progress(&self) -> bool;
    /// The lowest log level the caller wants (`None`: no logs). Sent as
    /// `_meta` `logLevel` to stateless backends (MCP 2026-07-28
    /// server/utilities/logging); `None` by default.
    fn log_level(&self) -> Option<LogLevel> {
        None
    }
    /// The client capabilities a 2026-07-28 backend is told this request's client
    /// has (`_meta` `clientCapabilities`, MCP 2026-07-28 basic/index): only what
    /// the caller can carry back to its host. `None` (the default): `{}`, none.
    fn client_capabilities(&self) -> Option<serde_json::Value> {
        None
    }
    /// The request became upstream request `id` on `conn` (it is pending from now
    /// on, so a cancel finds it). `false`: the caller gave up meanwhile, and the
    /// request is not sent.
    fn started(&self, conn: &Arc<Connection>, id: u64) -> bool;
    /// The caller as `Any`, so the handler that created it can downcast it.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// The trace the upstream request continues (its CLIENT span is a child of
    /// it); `None` (the default): not traced.
    fn trace_parent(&self) -> Option<opentelemetry::Context> {
        None
    }
    /// The `x-mcp-header` annotations of the tool this request calls, mirrored
    /// into `Mcp-Param-*` headers toward 2026-07-28 HTTP backends (MCP
    /// 2026-07-28 streamable-http, custom headers); `None` (the default): none.
    fn param_headers(&self) -> Option<Arc<ParamHeaders>> {
        None
    }
    /// The connection's own background request (a listen), never the call a
    /// backend message is guessed to relate to; `false` by default.
    fn background(&self) -> bool {
        false
    }
}

/// Receives what backends send on their own initiative, and answers what the
/// client face must ask about a connection's owner. Implemented by the layer that
/// gave the connection its [`Owner`] (the gateway's relay).
///
/// `call` is the request the message relates to, when the connection could tell
/// (progress token, the HTTP stream it came on, or the only request with a caller
/// in flight: on an exclusive connection for anything, on a shared one only for
/// server→client requests and `notifications/message`).
pub trait UpstreamHandler: Send + Sync + 'static {
    /// A notification from the backend.
    fn on_notification(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<dyn Caller>>,
        n: Notification,
    );
    /// A request from the backend; answer it with [`Connection::respond`].
    fn on_request(&self, conn: &Arc<Connection>, call: Option<Arc<dyn Caller>>, r: Request);
    /// The connection closed (process exit, transport failure or [`Connection::close`]).
    fn on_closed(&self, conn: &Arc<Connection>);
    /// The access token of the client that owns `conn` (exclusive connections),
    /// for credentials exchanged for it (RFC 8693). `None` by default.
    fn subject_token(&self, conn: &Connection) -> Option<Arc<str>> {
        let _ = conn;
        None
    }
}
