//! The MCP vocabulary, in one place: method names ([`Method`], parsed once when a
//! message is framed), the paginated lists ([`ListKind`]), log levels
//! ([`LogLevel`]), the `_meta` keys the gateway reads, and the protocol revisions
//! with everything that differs between them ([`version`]), and what a server may
//! ask its client for ([`input`]).
//!
//! Source: MCP 2025-11-25 schema (`schema.ts`, method names of every request and
//! notification) and MCP 2026-07-28 (`server/discover`, `subscriptions/listen`).

pub(crate) mod input;
pub(crate) mod marks;
pub(crate) mod names;
pub(crate) mod version;

use std::fmt;

use crate::jsonrpc;

pub use version::ProtocolVersion;

/// `_meta` key that marks a 2026-07-28 ("modern") request and names its revision
/// (MCP 2026-07-28 basic/versioning).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// `_meta` key of the per-request client capabilities (MCP 2026-07-28 basic/index).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// `_meta` key of the per-request client identity (MCP 2026-07-28 basic/index).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// `_meta` key of the per-request log level (MCP 2026-07-28 server/utilities/logging).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// `_meta` key of the server's identity in 2026-07-28 results (MCP 2026-07-28 basic/index).
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// `_meta` key tying a `subscriptions/listen` stream's messages to it: the
/// listen request's JSON-RPC id (MCP 2026-07-28 basic/patterns/subscriptions).
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The four per-request keys of a 2026-07-28 envelope; the gateway's own hop to a
/// backend carries its own, never the host's.
pub const META_ENVELOPE: [&str; 4] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
];

/// The gateway's `Implementation` (`serverInfo` / `clientInfo`).
pub fn implementation() -> serde_json::Value {
    serde_json::json!({"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")})
}

/// `_meta` key tying a message to a task (MCP 2025-11-25 basic/utilities/tasks).
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

macro_rules! methods {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, )*) => {
        /// A JSON-RPC method name of MCP: requests in both directions and
        /// notifications. Unknown names are kept in [`Method::Other`] and passed
        /// through where the gateway relays them.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum Method {
            $( $(#[$doc])* $variant, )*
            /// Any other method name, kept verbatim.
            Other(Box<str>),
        }

        impl Method {
            /// Parses a wire method name (never fails: unknown names are `Other`).
            pub fn parse(name: &str) -> Method {
                match name {
                    $( $name => Method::$variant, )*
                    other => Method::Other(other.into()),
                }
            }

            /// The wire name, e.g. `"tools/call"`.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Method::$variant => $name, )*
                    Method::Other(name) => name,
                }
            }

            /// The metric label: the wire name for every method MCP defines,
            /// `"other"` for the rest, so the label set stays bounded.
            pub fn label(&self) -> &'static str {
                match self {
                    $( Method::$variant => $name, )*
                    Method::Other(_) => "other",
                }
            }
        }
    };
}

methods! {
    /// `initialize` (legacy lifecycle).
    Initialize = "initialize",
    /// `ping`.
    Ping = "ping",
    /// `tools/list`.
    ToolsList = "tools/list",
    /// `tools/call`.
    ToolsCall = "tools/call",
    /// `prompts/list`.
    PromptsList = "prompts/list",
    /// `prompts/get`.
    PromptsGet = "prompts/get",
    /// `resources/list`.
    ResourcesList = "resources/list",
    /// `resources/templates/list`.
    ResourcesTemplatesList = "resources/templates/list",
    /// `resources/read`.
    ResourcesRead = "resources/read",
    /// `resources/subscribe`.
    ResourcesSubscribe = "resources/subscribe",
    /// `resources/unsubscribe`.
    ResourcesUnsubscribe = "resources/unsubscribe",
    /// `completion/complete`.
    CompletionComplete = "completion/complete",
    /// `logging/setLevel`.
    LoggingSetLevel = "logging/setLevel",
    /// `tasks/get`.
    TasksGet = "tasks/get",
    /// `tasks/result`.
    TasksResult = "tasks/result",
    /// `tasks/list`.
    TasksList = "tasks/list",
    /// `tasks/cancel`.
    TasksCancel = "tasks/cancel",
    /// `server/discover` (2026-07-28).
    ServerDiscover = "server/discover",
    /// `subscriptions/listen` (2026-07-28).
    SubscriptionsListen = "subscriptions/listen",
    /// `sampling/createMessage` (server→client).
    SamplingCreateMessage = "sampling/createMessage",
    /// `elicitation/create` (server→client).
    ElicitationCreate = "elicitation/create",
    /// `roots/list` (server→client).
    RootsList = "roots/list",
    /// `notifications/initialized`.
    Initialized = "notifications/initialized",
    /// `notifications/cancelled`.
    Cancelled = "notifications/cancelled",
    /// `notifications/progress`.
    Progress = "notifications/progress",
    /// `notifications/message` (logging).
    LogMessage = "notifications/message",
    /// `notifications/tools/list_changed`.
    ToolsListChanged = "notifications/tools/list_changed",
    /// `notifications/prompts/list_changed`.
    PromptsListChanged = "notifications/prompts/list_changed",
    /// `notifications/resources/list_changed`.
    ResourcesListChanged = "notifications/resources/list_changed",
    /// `notifications/resources/updated`.
    ResourcesUpdated = "notifications/resources/updated",
    /// `notifications/roots/list_changed`.
    RootsListChanged = "notifications/roots/list_changed",
    /// `notifications/tasks/status`.
    TaskStatus = "notifications/tasks/status",
    /// `notifications/elicitation/complete`.
    ElicitationComplete = "notifications/elicitation/complete",
    /// `notifications/subscriptions/acknowledged` (2026-07-28).
    SubscriptionsAcknowledged = "notifications/subscriptions/acknowledged",
}

impl Method {
    /// The list this method serves, if it is one of the four paginated lists.
    pub fn list_kind(&self) -> Option<ListKind> {
        Some(match self {
            Method::ToolsList => ListKind::Tools,
            Method::PromptsList => ListKind::Prompts,
            Method::ResourcesList => ListKind::Resources,
            Method::ResourcesTemplatesList => ListKind::Templates,
            _ => return None,
        })
    }

    /// The client capability a server→client request needs (`sampling`,
    /// `elicitation`, `roots`), for those three requests.
    pub fn client_capability(&self) -> Option<&'static str> {
        Some(match self {
            Method::SamplingCreateMessage => "sampling",
            Method::ElicitationCreate => "elicitation",
            Method::RootsList => "roots",
            _ => return None,
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The envelope parses a method name into a `Method` once, when a message is framed.
impl jsonrpc::MethodName for Method {
    fn from_name(name: &str) -> Self {
        Method::parse(name)
    }

    /// The requests routed by one member (`name`, `uri`), forwarded with only
    /// its value replaced when nothing else must change (`dispatch`).
    fn keeps_params_text(&self) -> bool {
        matches!(
            self,
            Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead
        )
    }
}

/// An MCP request: the JSON-RPC envelope with its method parsed into [`Method`].
pub type Request = jsonrpc::Request<Method>;

/// An MCP notification: the JSON-RPC envelope with its method parsed into [`Method`].
pub type Notification = jsonrpc::Notification<Method>;

/// An MCP message of any kind, as [`jsonrpc::parse_message`] and
/// [`jsonrpc::classify_raw`] frame it for the gateway.
pub type Message = jsonrpc::Message<Method>;

/// The four paginated lists (MCP 2025-11-25 server/utilities/pagination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// `tools/list`.
    Tools = 0,
    /// `prompts/list`.
    Prompts = 1,
    /// `resources/list`.
    Resources = 2,
    /// `resources/templates/list`.
    Templates = 3,
}

impl ListKind {
    /// All kinds, in index order.
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::Templates,
    ];

    /// The result member holding the items.
    pub fn key(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The list method.
    pub fn method(self) -> Method {
        match self {
            ListKind::Tools => Method::ToolsList,
            ListKind::Prompts => Method::PromptsList,
            ListKind::Resources => Method::ResourcesList,
            ListKind::Templates => Method::ResourcesTemplatesList,
        }
    }
}

/// The three lists a `list_changed` notification can announce (resources and
/// resource templates share one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// `notifications/tools/list_changed`.
    Tools,
    /// `notifications/prompts/list_changed`.
    Prompts,
    /// `notifications/resources/list_changed`.
    Resources,
}

impl Changed {
    /// All three, in this order.
    pub const ALL: [Changed; 3] = [Changed::Tools, Changed::Prompts, Changed::Resources];

    /// The notification method.
    pub fn method(self) -> Method {
        match self {
            Changed::Tools => Method::ToolsListChanged,
            Changed::Prompts => Method::PromptsListChanged,
            Changed::Resources => Method::ResourcesListChanged,
        }
    }
}

/// Log levels of MCP server/utilities/logging, in RFC 5424 order of severity
/// (`Debug` is the least severe).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `notice`.
    Notice,
    /// `warning`.
    Warning,
    /// `error`.
    Error,
    /// `critical`.
    Critical,
    /// `alert`.
    Alert,
    /// `emergency`.
    Emergency,
}

impl LogLevel {
    /// All levels, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// Parses a wire level; `None` for anything else.
    pub fn parse(s: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The wire name, e.g. `"warning"`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_round_trip_and_unknown_ones_pass_through() {
        for name in ["tools/call", "notifications/cancelled", "server/discover"] {
            assert_eq!(Method::parse(name).as_str(), name);
            assert_eq!(Method::parse(name).label(), name);
        }
        let other = Method::parse("vendor/thing");
        assert_eq!(other, Method::Other("vendor/thing".into()));
        assert_eq!(other.as_str(), "vendor/thing");
        assert_eq!(other.label(), "other");
        assert_eq!(Method::parse("evil/\"label").label(), "other");
        assert_eq!(Method::ToolsList.list_kind(), Some(ListKind::Tools));
        assert_eq!(Method::ToolsCall.list_kind(), None);
        for kind in ListKind::ALL {
            assert_eq!(kind.method().list_kind(), Some(kind));
        }
    }

    #[test]
    fn log_levels_are_ordered_by_severity() {
        assert!(LogLevel::Debug < LogLevel::Info);
        assert!(LogLevel::Warning < LogLevel::Emergency);
        assert!(LogLevel::Debug < LogLevel::Emergency);
        assert_eq!(LogLevel::parse("verbose"), None);
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("WARNING"), None);
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::parse(l.as_str()), Some(l));
        }
    }
}
