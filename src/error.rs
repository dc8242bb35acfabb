//! The JSON-RPC error plane: every error the gateway answers inside a JSON-RPC
//! response (with the host's id, HTTP 200 or on the SSE stream), as one type.
//! Errors decided before a request id is trusted (transport, auth, session) are
//! the HTTP plane, `http::HttpError`; the two never mix.
//!
//! Codes: JSON-RPC 2.0 §5.1 (-32600, -32601, -32602, -32603) and MCP 2025-11-25
//! server/resources "Error Handling" (-32002 resource not found).

use std::borrow::Cow;

use serde_json::json;

use crate::backend::BackendError;
use crate::jsonrpc::{self, ErrorObject};

pub(crate) use crate::jsonrpc::clip;

/// A JSON-RPC error answered to a host.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// `params` do not fit the method (-32602).
    #[error("{0}")]
    InvalidParams(Cow<'static, str>),
    /// No tool or prompt of that exposed name in the caller's view (-32602). The
    /// message does not say whether it exists but is hidden.
    #[error("Unknown {what}: {}", clip(name))]
    UnknownName {
        /// `"tool"` or `"prompt"`.
        what: &'static str,
        /// The name the host asked for.
        name: String,
    },
    /// A task id this session never created (-32602).
    #[error("Unknown task: {}", clip(.0))]
    UnknownTask(String),
    /// A task the session made through a stdio child that has stopped since
    /// (restarted, or ended with the replica that ran it): its id means
    /// nothing to the child serving the backend now, so nothing is forwarded
    /// (-32602, as a task that no longer exists; `data.taskId`,
    /// `data.backend`).
    #[error("Task {} was lost when its backend process restarted", clip(.task))]
    TaskLost {
        /// The exposed task id.
        task: String,
        /// The backend's configured name.
        backend: String,
    },
    /// A task held by a stdio child that another live replica runs, which
    /// this one cannot reach (-32603; `data.taskId`, `data.backend`,
    /// `data.replica` its tag): a request that lands on that replica reaches it.
    #[error("Task {} is held by its backend's process on another gateway replica", clip(.task))]
    TaskElsewhere {
        /// The exposed task id.
        task: String,
        /// The backend's configured name.
        backend: String,
        /// The tag of the replica that runs the process.
        replica: String,
    },
    /// A `completion/complete` reference to nothing in the caller's view (-32602).
    #[error("Unknown reference")]
    UnknownReference,
    /// A cursor that is forged, from another list, or from an older catalogue (-32602).
    #[error("Invalid or expired cursor")]
    InvalidCursor,
    /// No resource of that exposed URI (-32002, `data.uri` = the URI asked for,
    /// [`clip`]ped).
    #[error("Resource not found")]
    ResourceNotFound {
        /// The URI as the host sent it.
        uri: String,
    },
    /// The method is not served (-32601).
    #[error("Method not found: {}", clip(.0))]
    MethodNotFound(String),
    /// A capability the gateway cannot serve for this item (-32601).
    #[error("{0}")]
    Unsupported(Cow<'static, str>),
    /// The request is not acceptable in this state (-32600).
    #[error("{0}")]
    InvalidRequest(Cow<'static, str>),
    /// A 2026-07-28 retry (`requestState` and `inputResponses`) of a bridged
    /// call whose continuation another replica holds (-32603, `data.holder`,
    /// `data.replica` and `data.action`: what the client can do). The call is
    /// never run again here (dual-era.md R33).
    #[error("continuation not on this replica")]
    ContinuationElsewhere {
        /// The replica that parked the continuation.
        holder: String,
        /// The replica that received the retry.
        replica: String,
    },
    /// A 2026-07-28 retry of a bridged call whose continuation is no longer
    /// parked: already resumed (a replayed `requestState`), expired or
    /// cancelled (-32603).
    #[error("continuation not found: already resumed, expired or cancelled")]
    ContinuationGone,
    /// The backend failed or answered with an error (passed on unchanged, or
    /// -32603 with `data.backend`).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl RpcError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            RpcError::InvalidParams(_)
            | RpcError::UnknownName { .. }
            | RpcError::UnknownTask(_)
            | RpcError::TaskLost { .. }
            | RpcError::UnknownReference
            | RpcError::InvalidCursor => jsonrpc::INVALID_PARAMS,
            RpcError::ResourceNotFound { .. } => jsonrpc::RESOURCE_NOT_FOUND,
            RpcError::MethodNotFound(_) | RpcError::Unsupported(_) => jsonrpc::METHOD_NOT_FOUND,
            RpcError::InvalidRequest(_) => jsonrpc::INVALID_REQUEST,
            RpcError::ContinuationElsewhere { .. }
            | RpcError::ContinuationGone
            | RpcError::TaskElsewhere { .. } => jsonrpc::INTERNAL_ERROR,
            RpcError::Backend(e) => e.to_error_object().code,
        }
    }

    /// The error object the host receives.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            RpcError::Backend(e) => e.to_error_object(),
            RpcError::ResourceNotFound { uri } => {
                // The URI as sent, cut like a name (a 200 KB URI is not sent back).
                ErrorObject::new(self.code(), self.to_string())
                    .with_data(json!({ "uri": clip(uri) }))
            }
            RpcError::ContinuationElsewhere { holder, replica } => {
                ErrorObject::new(self.code(), self.to_string()).with_data(json!({
                    "holder": holder,
                    "replica": replica,
                    "action": "This call waits for its answers on the replica that asked \
                               (holder); a retry can be served only there. Send the call \
                               again without requestState and inputResponses to start it \
                               over; the waiting one is cancelled when it expires.",
                }))
            }
            RpcError::TaskLost { task, backend } => ErrorObject::new(self.code(), self.to_string())
                .with_data(json!({ "taskId": task, "backend": backend })),
            RpcError::TaskElsewhere {
                task,
                backend,
                replica,
            } => ErrorObject::new(self.code(), self.to_string())
                .with_data(json!({ "taskId": task, "backend": backend, "replica": replica })),
            _ => ErrorObject::new(self.code(), self.to_string()),
        }
    }

    /// A -32602 error with `message`.
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        RpcError::InvalidParams(message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let e = RpcError::UnknownName {
            what: "tool",
            name: "x__y".into(),
        };
        assert_eq!(e.code(), -32602);
        assert_eq!(e.to_error_object().message, "Unknown tool: x__y");
        let long = "é".repeat(100_000);
        let e = RpcError::UnknownName {
            what: "tool",
            name: long.clone(),
        };
        let message = e.to_string();
        assert!(message.len() < 400, "{}", message.len());
        assert!(message.ends_with("… (200000 bytes)"), "{message}");
        assert_eq!(
            RpcError::MethodNotFound("m".into()).to_string(),
            "Method not found: m"
        );
        let e = RpcError::ResourceNotFound {
            uri: "a+b://c".into(),
        };
        let o = e.to_error_object();
        assert_eq!((o.code, o.data), (-32002, Some(json!({"uri": "a+b://c"}))));
        assert_eq!(RpcError::MethodNotFound("x/y".into()).code(), -32601);
        let backend = RpcError::Backend(BackendError::Rpc(ErrorObject::new(-32099, "custom")));
        assert_eq!(backend.code(), -32099, "backend errors pass through");
        let lost = RpcError::TaskLost {
            task: "fx:task-1".into(),
            backend: "fx".into(),
        }
        .to_error_object();
        assert_eq!(lost.code, -32602);
        assert_eq!(
            lost.message,
            "Task fx:task-1 was lost when its backend process restarted"
        );
        assert_eq!(
            lost.data,
            Some(json!({"taskId": "fx:task-1", "backend": "fx"}))
        );
    }
}
