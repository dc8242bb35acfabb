//! How a host request ended ([`Outcome`], the `outcome` metric label) and why
//! one was refused before routing ([`Rejection`]).

use serde::Deserialize;
use serde_json::Value;

use crate::backend::BackendError;
use crate::error::RpcError;
use crate::jsonrpc;

/// Why a request was refused on the HTTP plane, before routing (metric label
/// `mcpgate_rejections_total{reason,era}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// 403: Origin not allowed (DNS-rebinding guard).
    Origin,
    /// 403: Host not allowed.
    Host,
    /// 406: Accept lacks the required media types.
    Accept,
    /// 415: Content-Type is not `application/json`.
    ContentType,
    /// 413: body larger than `server.max_body_bytes`.
    BodyTooLarge,
    /// 408: body did not arrive within `server.body_read_timeout`.
    BodyTimeout,
    /// 400: not a JSON-RPC message (-32700 / -32600).
    InvalidMessage,
    /// 400: a 2026-07-28 request while the modern face is off.
    ModernProbe,
    /// 400: a 2026-07-28 request without its required `_meta` fields (-32602).
    ModernEnvelope,
    /// 400: a header that disagrees with the body (-32020).
    HeaderMismatch,
    /// 404: a method the 2026-07-28 face does not serve (-32601).
    MethodNotFound,
    /// 405: GET or DELETE from a 2026-07-28 client (no sessions, no GET stream),
    /// or a method an MCP endpoint does not serve (`PUT`, …).
    MethodNotAllowed,
    /// 400: `MCP-Protocol-Version` missing a supported value.
    Version,
    /// 400: no `Mcp-Session-Id` where one is required.
    SessionMissing,
    /// 404: unknown, expired or foreign session.
    SessionUnknown,
    /// 400 / 410: `Last-Event-ID` malformed or no longer replayable.
    Resume,
    /// 503: `server.max_sessions` reached.
    TooManySessions,
    /// 429: the client holds `server.max_sessions_per_client` sessions.
    TooManyClientSessions,
    /// 503: a new session while the gateway drains for shutdown.
    Draining,
    /// 503: a new session while the shared session store does not answer.
    StoreUnavailable,
    /// 429: `server.max_streams_per_session` reached.
    TooManyStreams,
    /// 429: the client's rate limit.
    RateLimited,
    /// 401: no or invalid bearer token.
    Unauthorized,
    /// 403: token lacks a required scope.
    InsufficientScope,
    /// 400: token in the query string.
    QueryToken,
    /// 499 (recorded, never sent): the client closed the connection before
    /// its request body was complete.
    ClientClosed,
    /// Anything else on the HTTP plane.
    Other,
}

impl Rejection {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::Origin | Rejection::Host => "origin",
            Rejection::Accept => "accept",
            Rejection::ContentType => "content_type",
            Rejection::BodyTooLarge => "body_too_large",
            Rejection::BodyTimeout => "body_timeout",
            Rejection::InvalidMessage => "invalid_message",
            Rejection::ModernProbe => "modern_probe",
            Rejection::ModernEnvelope => "modern_envelope",
            Rejection::HeaderMismatch => "header_mismatch",
            Rejection::MethodNotFound => "method_not_found",
            Rejection::MethodNotAllowed => "method_not_allowed",
            Rejection::Version => "version",
            Rejection::SessionMissing => "session_missing",
            Rejection::SessionUnknown => "session_unknown",
            Rejection::Resume => "resume",
            Rejection::TooManySessions => "too_many_sessions",
            Rejection::TooManyClientSessions => "too_many_client_sessions",
            Rejection::Draining => "draining",
            Rejection::StoreUnavailable => "store_unavailable",
            Rejection::TooManyStreams => "too_many_streams",
            Rejection::RateLimited => "rate_limited",
            Rejection::Unauthorized => "unauthorized",
            Rejection::InsufficientScope => "insufficient_scope",
            Rejection::QueryToken => "query_token",
            Rejection::ClientClosed => "client_closed",
            Rejection::Other => "other",
        }
    }

    /// Whether this is an authentication or authorization refusal (also counted
    /// in `mcpgate_auth_failures_total`).
    pub fn is_auth(self) -> bool {
        matches!(
            self,
            Rejection::Unauthorized | Rejection::InsufficientScope | Rejection::QueryToken
        )
    }
}

/// How a host request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result.
    Ok,
    /// A 2026-07-28 `input_required` result: the call waits for the host's retry.
    InputRequired,
    /// A JSON-RPC error decided by the gateway (unknown tool, bad params …).
    Error,
    /// A JSON-RPC error from the backend, passed on.
    RpcError,
    /// The backend did not answer in time.
    Timeout,
    /// The backend could not be reached; the class names how
    /// (`mcpgate_upstream_errors_total{class}`).
    Unavailable(&'static str),
    /// The gateway's own limit for the backend refused the call (counted as
    /// unavailable, and as a `backend_busy` rejection).
    Busy,
    /// The host cancelled, or went away before the answer.
    Cancelled,
    /// Refused on the HTTP plane, before routing.
    Rejected(Rejection),
}

impl Outcome {
    /// The `outcome` label of `mcpgate_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::InputRequired => "input_required",
            Outcome::Error => "error",
            Outcome::RpcError => "rpc_error",
            Outcome::Timeout => "timeout",
            Outcome::Unavailable(_) | Outcome::Busy => "unavailable",
            Outcome::Cancelled => "cancelled",
            Outcome::Rejected(_) => "rejected",
        }
    }

    /// The outcome of answering `e`.
    pub fn of(e: &RpcError) -> Outcome {
        match e {
            RpcError::Backend(b) => Outcome::of_backend(b),
            _ => Outcome::Error,
        }
    }

    /// The outcome of a failed backend call.
    pub fn of_backend(e: &BackendError) -> Outcome {
        match e {
            BackendError::Rpc(_) => Outcome::RpcError,
            BackendError::Cancelled => Outcome::Cancelled,
            BackendError::Timeout { .. } => Outcome::Timeout,
            BackendError::Busy { .. } => Outcome::Busy,
            BackendError::Unavailable { .. } => Outcome::Unavailable("closed"),
            BackendError::Protocol { .. } => Outcome::Unavailable("protocol"),
            BackendError::HttpStatus { status, .. } if *status >= 500 => {
                Outcome::Unavailable("http_5xx")
            }
            BackendError::HttpStatus { .. } => Outcome::Unavailable("http_4xx"),
        }
    }

    /// The `class` label of `mcpgate_upstream_errors_total`, for backend failures.
    pub(super) fn upstream_class(self) -> Option<&'static str> {
        match self {
            Outcome::Timeout => Some("timeout"),
            Outcome::Unavailable(class) => Some(class),
            _ => None,
        }
    }
}

impl Outcome {
    /// The outcome of a request another replica ran, read from the JSON-RPC
    /// response it sent (`data`; empty: none came, the host cancelled) and the
    /// JSON-RPC error code, if any. A result is [`Outcome::Ok`]; a
    /// gateway-made backend failure (`-32603` with `data.backend`,
    /// [`BackendError::to_error_object`]) gets its class back from its
    /// message; any other error is [`Outcome::RpcError`] when the request was
    /// routed to a backend (`routed`: most likely the backend's own, passed
    /// on), else [`Outcome::Error`].
    pub fn of_answer(data: &[u8], routed: bool) -> (Outcome, Option<i64>) {
        #[derive(Deserialize)]
        struct Answer {
            error: Option<Failure>,
        }
        #[derive(Deserialize)]
        struct Failure {
            code: i64,
            #[serde(default)]
            message: String,
            data: Option<Value>,
        }
        if data.is_empty() {
            return (Outcome::Cancelled, None);
        }
        let Ok(answer) = serde_json::from_slice::<Answer>(data) else {
            return (Outcome::Error, None);
        };
        let Some(e) = answer.error else {
            return (Outcome::Ok, None);
        };
        let by_gateway = e.code == jsonrpc::INTERNAL_ERROR
            && e.data
                .as_ref()
                .and_then(|d| d.get("backend"))
                .is_some_and(Value::is_string);
        let m = e.message.as_str();
        let outcome = match () {
            _ if !by_gateway => match routed {
                true => Outcome::RpcError,
                false => Outcome::Error,
            },
            _ if m.contains("\" did not answer within ") => Outcome::Timeout,
            _ if m.contains("\" is unavailable: busy: ") => Outcome::Busy,
            _ if m.contains("\" is unavailable: ") => Outcome::Unavailable("closed"),
            _ if m.contains("\" broke the protocol: ") => Outcome::Unavailable("protocol"),
            _ if m.contains("\" answered HTTP 5") => Outcome::Unavailable("http_5xx"),
            _ if m.contains("\" answered HTTP ") => Outcome::Unavailable("http_4xx"),
            _ => Outcome::Error,
        };
        (outcome, Some(e.code))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// What a replica reads back from another's answer is what that one
    /// recorded, for every backend failure the gateway words itself.
    #[test]
    fn an_answers_outcome_is_the_one_its_replica_recorded() {
        let b = || "fx".to_owned();
        let failures = [
            BackendError::Timeout {
                backend: b(),
                after: Duration::from_secs(3),
            },
            BackendError::Busy {
                backend: b(),
                reason: "max_concurrency".into(),
            },
            BackendError::closed("fx", "exited"),
            BackendError::protocol("fx", "bad line"),
            BackendError::HttpStatus {
                backend: b(),
                status: 502,
            },
            BackendError::HttpStatus {
                backend: b(),
                status: 404,
            },
            BackendError::Rpc(crate::jsonrpc::ErrorObject::new(-32602, "bad")),
        ];
        for e in failures {
            let answer = crate::jsonrpc::error_bytes(
                Some(&serde_json::from_str("1").unwrap()),
                &e.to_error_object(),
            );
            let (outcome, code) = Outcome::of_answer(&answer, true);
            assert_eq!(outcome, Outcome::of_backend(&e), "{e}");
            assert_eq!(code, Some(e.to_error_object().code));
        }
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert_eq!(Outcome::of_answer(ok, true), (Outcome::Ok, None));
        assert_eq!(Outcome::of_answer(b"", true).0, Outcome::Cancelled);
        let unknown =
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}}"#;
        assert_eq!(
            Outcome::of_answer(unknown, false),
            (Outcome::Error, Some(-32602))
        );
    }
}
