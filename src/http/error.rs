//! The HTTP plane: rejections decided before a request is routed (transport,
//! auth, session and envelope failures), each with the status the spec names, a
//! JSON-RPC error body and the typed [`Rejection`] it is counted as. The one place
//! an [`HttpError`] becomes a response is its `IntoResponse`.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::jsonrpc::{self, EnvelopeError, ErrorObject, Id};
use crate::request::Rejection;

/// A rejection with an HTTP status and a JSON-RPC error body.
#[derive(Debug, Clone)]
pub struct HttpError {
    /// Why (the metric label and the access log's reason).
    pub reason: Rejection,
    /// The status code.
    pub status: StatusCode,
    /// The body.
    pub detail: Box<ErrorDetail>,
}

/// The JSON-RPC part of an [`HttpError`].
#[derive(Debug, Clone)]
pub struct ErrorDetail {
    /// The JSON-RPC error in the body.
    pub error: ErrorObject,
    /// `Some(id)` writes `"id"` (JSON-RPC 2.0 §5: `null` when unreadable);
    /// `None` omits it (MCP transports: "a JSON-RPC error response that has no id").
    pub id: Option<Option<Id>>,
    /// Response headers the rejection needs (`WWW-Authenticate`, `Retry-After`,
    /// `Connection: close`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl HttpError {
    /// A transport-level rejection (no `id` in the body).
    pub fn new(
        reason: Rejection,
        status: StatusCode,
        code: i64,
        message: impl Into<String>,
    ) -> Self {
        HttpError {
            reason,
            status,
            detail: Box::new(ErrorDetail {
                error: ErrorObject::new(code, message),
                id: None,
                headers: Vec::new(),
            }),
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.detail.headers.push((name, value));
        self
    }

    /// 400 for a body that is not a JSON-RPC message (`-32700` / `-32600`; a
    /// malformed response's error has no `id`).
    pub fn envelope(e: &EnvelopeError) -> Self {
        HttpError {
            reason: Rejection::InvalidMessage,
            status: StatusCode::BAD_REQUEST,
            detail: Box::new(ErrorDetail {
                error: e.to_error_object(),
                // A response is refused with no id (MCP transports), not `null`.
                id: (!e.is_response()).then(|| e.id().cloned()),
                headers: Vec::new(),
            }),
        }
    }

    /// 400: a non-initialize request without `Mcp-Session-Id`.
    pub fn missing_session() -> Self {
        HttpError::new(
            Rejection::SessionMissing,
            StatusCode::BAD_REQUEST,
            jsonrpc::TRANSPORT_ERROR,
            "Bad Request: Mcp-Session-Id header is required",
        )
    }

    /// 404: unknown, expired or ended session; the host must re-initialize.
    pub fn unknown_session() -> Self {
        HttpError::new(
            Rejection::SessionUnknown,
            StatusCode::NOT_FOUND,
            jsonrpc::SESSION_NOT_FOUND,
            "Session not found",
        )
    }

    /// 503: the store holds `server.max_sessions` sessions.
    pub fn too_many_sessions() -> Self {
        HttpError::new(
            Rejection::TooManySessions,
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Service Unavailable: too many sessions",
        )
    }

    /// 429 for `initialize` when the client already holds
    /// `server.max_sessions_per_client` sessions (`limit`) and none of them
    /// can be ended to make room (RFC 6585 §4; add `Retry-After`).
    pub fn too_many_client_sessions(limit: usize) -> Self {
        HttpError::new(
            Rejection::TooManyClientSessions,
            StatusCode::TOO_MANY_REQUESTS,
            jsonrpc::TRANSPORT_ERROR,
            format!(
                "Too Many Requests: this client already holds {limit} sessions \
                 (server.max_sessions_per_client); end sessions it no longer uses (DELETE)"
            ),
        )
    }

    /// 503 + `Retry-After: 1` for `initialize` while the gateway drains for
    /// shutdown (RFC 9110 §10.2.3): the host should open its session on another
    /// replica, which the load balancer picks once `/readyz` took this one out.
    pub fn draining() -> Self {
        HttpError::new(
            Rejection::Draining,
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Service Unavailable: this gateway is shutting down; retry (another replica)",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// 503 + `Retry-After: 1` for `initialize` while the shared session store
    /// (`[cluster] redis`) does not answer: a session other replicas could not
    /// see would break as soon as the balancer sends the host elsewhere.
    pub fn store_unavailable() -> Self {
        HttpError::new(
            Rejection::StoreUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Service Unavailable: the shared session store does not answer; retry",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// 403: a browser Origin or Host header that is not allowed.
    pub fn forbidden_origin() -> Self {
        HttpError::new(
            Rejection::Origin,
            StatusCode::FORBIDDEN,
            jsonrpc::TRANSPORT_ERROR,
            "Forbidden: origin not allowed",
        )
    }

    /// 403: a `Host` header a loopback bind does not answer to (DNS rebinding;
    /// `server.allowed_hosts` adds names).
    pub fn forbidden_host() -> Self {
        HttpError::new(
            Rejection::Host,
            StatusCode::FORBIDDEN,
            jsonrpc::TRANSPORT_ERROR,
            "Forbidden: Host not allowed (server.allowed_hosts)",
        )
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = match &self.detail.id {
            None => jsonrpc::error_bytes_without_id(&self.detail.error),
            Some(id) => jsonrpc::error_bytes(id.as_ref(), &self.detail.error),
        };
        let mut resp = (self.status, body).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, value) in self.detail.headers {
            h.insert(name, value);
        }
        resp
    }
}
