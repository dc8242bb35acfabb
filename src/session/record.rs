//! The durable part of a host session: plain data that can be serialized, so a
//! shared store can hold it for several replicas (DESIGN decision 6 and 11). It
//! names backends by their configured names, never by registry indices (those
//! are per process and per reload).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::PrincipalId;
use crate::mcp::{LogLevel, ProtocolVersion};

/// What a session is and what it changed, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The principal (issuer + subject) that created the session; only it may use
    /// the session (`None` when the endpoint is open).
    pub principal: Option<PrincipalId>,
    /// The revision negotiated with the host.
    pub version: ProtocolVersion,
    /// The host's `initialize` capabilities, verbatim.
    pub client_capabilities: Value,
    /// The host's `clientInfo`, verbatim.
    pub client_info: Value,
    /// The level set with `logging/setLevel`; `None`: the host set none (every
    /// message reaches it).
    pub log_level: Option<LogLevel>,
    /// Backend sessions opened for this host session (per-session HTTP backends),
    /// by backend name.
    pub upstream_sessions: BTreeMap<String, UpstreamSession>,
    /// Resource subscriptions: (backend name, the backend's URI).
    pub subscriptions: BTreeSet<(String, String)>,
    /// Tasks the session created, by exposed task id.
    pub tasks: BTreeMap<String, TaskRoute>,
}

impl SessionRecord {
    /// The record of a session a host just initialized.
    pub fn new(version: ProtocolVersion, client_capabilities: Value, client_info: Value) -> Self {
        SessionRecord {
            principal: None,
            version,
            client_capabilities,
            client_info,
            log_level: None,
            upstream_sessions: BTreeMap::new(),
            subscriptions: BTreeSet::new(),
            tasks: BTreeMap::new(),
        }
    }
}

/// A backend's own session for one host session (its `Mcp-Session-Id` and the
/// revision negotiated with it, MCP 2025-11-25 basic/transports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSession {
    /// The backend's `Mcp-Session-Id`.
    pub id: String,
    /// The revision the backend negotiated.
    pub version: ProtocolVersion,
}

/// Where an exposed task id leads (MCP 2025-11-25 basic/utilities/tasks: a task
/// is bound to the session that created it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRoute {
    /// The backend's configured name.
    pub backend: String,
    /// The backend's task id.
    pub original: String,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    #[test]
    fn round_trips_through_json() {
        let mut r = SessionRecord::new(
            ProtocolVersion::V2025_06_18,
            json!({"sampling": {}}),
            json!({"name": "host", "version": "1"}),
        );
        r.principal = Some(PrincipalId {
            issuer: Arc::from("https://issuer.test"),
            subject: Arc::from("alice"),
        });
        r.log_level = Some(LogLevel::Warning);
        r.upstream_sessions.insert(
            "remote".into(),
            UpstreamSession {
                id: "abc".into(),
                version: ProtocolVersion::V2025_11_25,
            },
        );
        r.subscriptions.insert(("files".into(), "file:///a".into()));
        r.tasks.insert(
            "files:t1".into(),
            TaskRoute {
                backend: "files".into(),
                original: "t1".into(),
            },
        );
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"2025-06-18\""), "{text}");
        assert!(text.contains("\"warning\""), "{text}");
        let back: SessionRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }
}
