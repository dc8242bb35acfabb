//! The durable part of a host session: plain data that can be serialized, so a
//! shared store can hold it for several replicas (`cluster::SharedStore`). It
//! names backends by their configured names, never by registry indices (those
//! are per process and per reload).

use std::collections::{BTreeMap, BTreeSet, HashMap};

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
    /// Whether the replica owning the session's per-session stdio children
    /// marked that they list for it what their backends' catalogues do not
    /// (`ol`, written by that owner alone, `cluster/owner.rs`; read here,
    /// never written by [`SessionRecord::to_fields`]).
    #[serde(default)]
    pub lists_elsewhere: bool,
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
            lists_elsewhere: false,
        }
    }
}

impl SessionRecord {
    /// The record as the shared store's hash fields (`[cluster] redis`):
    /// `v` the revision, `caps` and `ci` the host's capabilities and
    /// `clientInfo` (JSON), `p` the principal (JSON, absent on an open
    /// endpoint), `lvl` the log level (absent until set); `ol` (read only:
    /// the owner's mark, [`SessionRecord::lists_elsewhere`]). Backend sessions
    /// are sealed fields of their own (`up:NAME`, written when opened:
    /// `supervisor/upstream.rs`), so are the subscriptions on per-session
    /// stdio backends (`sub:NAME:URI`, `cluster/owner.rs`, read back by the
    /// replica that takes the session's children over, not here) and the
    /// holders of its other subscriptions (`ss:NAME:URI`,
    /// `cluster/subscriptions.rs`), so are its tasks (`tk:EXPOSED` =
    /// [`TaskRoute::to_field`], written when the task is made:
    /// `cluster/tasks.rs`; read back here into [`SessionRecord::tasks`]).
    pub fn to_fields(&self) -> Vec<(&'static str, String)> {
        let mut f = vec![
            ("v", self.version.as_str().to_owned()),
            ("caps", self.client_capabilities.to_string()),
            ("ci", self.client_info.to_string()),
        ];
        if let Some(p) = &self.principal
            && let Ok(json) = serde_json::to_string(p)
        {
            f.push(("p", json));
        }
        if let Some(level) = self.log_level {
            f.push((LEVEL_FIELD, level.as_str().to_owned()));
        }
        f
    }

    /// The record from the shared store's hash fields ([`SessionRecord::to_fields`]);
    /// `None` when `v` or `caps` is missing or does not parse (not a record of
    /// ours). Unknown fields are ignored, so a later version may add some.
    pub fn from_fields(fields: &HashMap<String, String>) -> Option<SessionRecord> {
        let version = ProtocolVersion::parse(fields.get("v")?)?;
        let caps = serde_json::from_str(fields.get("caps")?).ok()?;
        let info = fields
            .get("ci")
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        let mut r = SessionRecord::new(version, caps, info);
        r.principal = fields.get("p").and_then(|t| serde_json::from_str(t).ok());
        r.log_level = fields.get(LEVEL_FIELD).and_then(|l| LogLevel::parse(l));
        r.lists_elsewhere = fields.contains_key(LISTS_FIELD);
        for (field, value) in fields {
            if let Some(exposed) = field.strip_prefix(TASK_FIELD)
                && let Some(route) = TaskRoute::from_field(value)
            {
                r.tasks.insert(exposed.to_owned(), route);
            }
        }
        Some(r)
    }
}

/// The record field that holds the log level (set on its own by `logging/setLevel`).
pub const LEVEL_FIELD: &str = "lvl";

/// The record field the owner of the session's per-session stdio children
/// sets while they list for it what their backends' catalogues do not (the
/// backends' names).
pub const LISTS_FIELD: &str = "ol";

/// A backend's own session for one host session (its `Mcp-Session-Id`, the
/// revision negotiated with it and the server capabilities it declared, MCP
/// 2025-11-25 basic/transports): what a replica needs to call the backend on
/// it without `initialize`. In the shared store it is a record field of its
/// own, sealed (`cluster::seal_upstream`, `supervisor/upstream.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSession {
    /// The backend's `Mcp-Session-Id`.
    pub id: String,
    /// The revision the backend negotiated.
    pub version: ProtocolVersion,
    /// The backend's server capabilities (`initialize` result).
    #[serde(default)]
    pub capabilities: Value,
}

/// Where an exposed task id leads (MCP 2025-11-25 basic/utilities/tasks: a task
/// is bound to the session that created it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRoute {
    /// The backend's configured name.
    pub backend: String,
    /// The backend's task id.
    pub original: String,
    /// The one backend process that holds the task, when only one does (a
    /// stdio child): `TAG/PID`, the replica's store tag (`-` without a
    /// store) and the child's process id. `None`: every connection to the
    /// backend reaches it (HTTP: a shared backend, or a per-session one whose
    /// backend session every replica uses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

/// The prefix of the record fields of a session's tasks (`tk:EXPOSED`), one
/// per task made through a backend that every replica reaches the same way
/// (not a per-session stdio child: those follow the owner, `cluster/owner.rs`).
pub const TASK_FIELD: &str = "tk:";

impl TaskRoute {
    /// The name of a backend process ([`TaskRoute::process`]): `TAG/PID` of
    /// replica `tag` and stdio child `pid` (`None`: not a stdio child).
    pub fn process_of(tag: &str, pid: Option<i32>) -> Option<String> {
        pid.map(|pid| format!("{tag}/{pid}"))
    }

    /// Whether the task is reached through a connection to process
    /// `process` ([`TaskRoute::process_of`]): always when it is bound to no
    /// process.
    pub fn reached_by(&self, process: Option<&str>) -> bool {
        self.process.is_none() || self.process.as_deref() == process
    }

    /// The route as the value of record field `tk:EXPOSED` (JSON).
    pub fn to_field(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The route of record field value `value` (`None`: not one of
    /// [`TaskRoute::to_field`]'s).
    pub fn from_field(value: &str) -> Option<TaskRoute> {
        serde_json::from_str(value).ok()
    }
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
                capabilities: json!({"tools": {}}),
            },
        );
        r.subscriptions.insert(("files".into(), "file:///a".into()));
        r.tasks.insert(
            "files:t1".into(),
            TaskRoute {
                backend: "files".into(),
                original: "t1".into(),
                process: Some("ab12cd34/77".into()),
            },
        );
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"2025-06-18\""), "{text}");
        assert!(text.contains("\"warning\""), "{text}");
        let back: SessionRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn round_trips_through_store_fields() {
        let mut r = SessionRecord::new(
            ProtocolVersion::V2025_11_25,
            json!({"sampling": {"tools": {}}, "x-custom": 1}),
            json!({"name": "host"}),
        );
        let fields = |r: &SessionRecord| -> HashMap<String, String> {
            r.to_fields()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        };
        assert_eq!(SessionRecord::from_fields(&fields(&r)), Some(r.clone()));
        r.principal = Some(PrincipalId {
            issuer: Arc::from("https://issuer.test"),
            subject: Arc::from("bob"),
        });
        r.log_level = Some(LogLevel::Error);
        let f = fields(&r);
        assert_eq!(f["lvl"], "error");
        assert_eq!(SessionRecord::from_fields(&f), Some(r.clone()));
        let mut marked = f.clone();
        marked.insert("ol".into(), "demo".into());
        r.lists_elsewhere = true;
        assert_eq!(SessionRecord::from_fields(&marked), Some(r));
        let route = TaskRoute {
            backend: "web".into(),
            original: "t-1".into(),
            process: None,
        };
        let mut tasked = f.clone();
        tasked.insert("tk:web:t-1".into(), route.to_field());
        tasked.insert("tk:web:bad".into(), "not json".into());
        let back = SessionRecord::from_fields(&tasked).unwrap();
        assert_eq!(back.tasks.len(), 1, "{back:?}");
        assert_eq!(back.tasks["web:t-1"], route);
        assert!(
            !route.to_field().contains("process"),
            "{}",
            route.to_field()
        );
        let mut broken = f.clone();
        broken.remove("v");
        assert_eq!(SessionRecord::from_fields(&broken), None, "no revision");
        assert_eq!(SessionRecord::from_fields(&HashMap::new()), None);
    }
}
