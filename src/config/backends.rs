//! `[backends.NAME]`: how each backend is reached (`Transport`), what the file
//! says (`RawBackend`, every transport's fields optional until validation checks
//! them against `type`) and what validation makes of it (`BackendConfig`), with
//! its tool filters and curation (`ToolFilter`, `ToolOverride`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::schema;
use super::{ArgumentAudit, BackendEra, ConnectionMode, OwnerLoss, UpstreamAuthConfig};

/// `[backends.NAME]`, as validated.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// How to reach the backend.
    pub transport: Transport,
    /// Name prefix; default the backend name; `""` exposes names unprefixed.
    pub prefix: Option<String>,
    /// Per-call timeout; default `server.request_timeout`.
    pub timeout: Option<Duration>,
    /// Connection mode; default `auto` for stdio, `per_session` for http.
    pub mode: Option<ConnectionMode>,
    /// Protocol era spoken to the backend; default `auto` (probed).
    pub era: BackendEra,
    /// Tool filters.
    pub tools: ToolFilter,
    /// Whether `/readyz` waits for this backend. Default false.
    pub required: bool,
    /// Most calls in flight to this backend at once; more wait in a queue.
    pub max_concurrency: Option<usize>,
    /// How long a call may wait for a free slot before failing ("busy"). Default 5 s.
    pub queue_timeout: Duration,
    /// per_session mode: most connections (child processes, backend sessions) open
    /// at once; sessions beyond it get a "busy" error. Default 256.
    pub max_connections: usize,
    /// per_session mode: most of those connections one client holds (its
    /// sessions' own and its stateless pool's): the principal (`iss`, `sub`), or
    /// on an open endpoint the client address (`server.trusted_proxies`). Default
    /// a quarter of `max_connections`, rounded up.
    pub max_connections_per_client: usize,
    /// per_session mode, stateless 2026-07-28 requests: most pooled connections
    /// of one pool key (backend, caller, declared capabilities) starting at once;
    /// other requests of the key wait (up to `queue_timeout`) for one to be
    /// ready or free. Default 2.
    pub pool_max_starting: usize,
    /// per_session mode: a pooled connection (stateless 2026-07-28 requests)
    /// unused this long is closed. Default 60 s.
    pub pool_idle_timeout: Duration,
    /// per_session mode: when a new connection would go over the client's
    /// `max_connections_per_client` (or the backend's `max_connections`), a
    /// session's own connection unused at least this long (no call in flight,
    /// no subscription or task of its session on it) is closed to make room:
    /// the client's least recently used one (for `max_connections` too, else
    /// any client's). Last use: handed to a call, a request sent or an answer
    /// received; never less than 1 s. Its session's next call opens a fresh one;
    /// what the backend kept for that session is lost. Default 5 min.
    pub reclaim_idle_after: Duration,
    /// A session's own connection to a per_session backend (or an auto one
    /// once it serves sessions their own), stdio or http, unused this long is
    /// closed; it reopens on the next call. Default (`None`): it lives as long
    /// as its session. When set, it is reopened with the session's log level
    /// and subscriptions, and one holding the session's subscriptions or tasks
    /// is kept. Never below `server.session_idle_timeout`. Pooled connections
    /// follow `pool_idle_timeout`; the shared connection (`shared`, or `auto`
    /// before the switch) is never closed for idleness.
    pub idle_timeout: Option<Duration>,
    /// http: a file of `Name: value` header lines (mounted secrets), read at
    /// each connect and merged over `headers`.
    pub headers_file: Option<PathBuf>,
    /// http: how the gateway authenticates to the backend (its own credentials).
    pub upstream_auth: Option<UpstreamAuthConfig>,
    /// What the access log says about a call's arguments.
    pub audit: ArgumentAudit,
    /// Whether routed `tools/call`s are counted per tool
    /// (`mcpgate_tool_calls_total`, `mcpgate_tool_call_duration_seconds`).
    pub tool_metrics: bool,
    /// With a shared store, per-session stdio: what a session's replica loss
    /// does to it (`respawn`, default, or `end_session`).
    pub on_owner_loss: OwnerLoss,
}

/// Backend transport settings, chosen by `type`.
#[derive(Debug, Clone)]
pub enum Transport {
    /// `type = "stdio"`: a child process speaking newline-delimited JSON-RPC.
    Stdio {
        /// Executable.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// `type = "http"`: a remote Streamable HTTP MCP server (falls back to the
    /// legacy HTTP+SSE transport when `initialize` is answered 400/404/405).
    Http {
        /// The MCP endpoint URL.
        url: String,
        /// Extra request headers (they never replace protocol headers).
        headers: BTreeMap<String, String>,
    },
    /// `type = "sse"`: a legacy (2024-11-05) HTTP+SSE server.
    Sse {
        /// The event stream URL.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
    },
}

/// The `type` field of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A child process over stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
    /// Legacy HTTP+SSE (2024-11-05).
    Sse,
}

/// `[backends.NAME]` as written in the file: every transport's fields are optional
/// here and checked against `type` by validation.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    /// Transport: `stdio` (a child process), `http` (Streamable HTTP, with fallback
    /// to the legacy transport) or `sse` (legacy 2024-11-05 HTTP+SSE).
    #[serde(rename = "type")]
    pub kind: BackendKind,
    /// stdio: executable.
    pub command: Option<String>,
    /// stdio: arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: extra environment variables of the child.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: working directory.
    pub cwd: Option<PathBuf>,
    /// http, sse: the endpoint URL (sse: the event stream URL).
    pub url: Option<String>,
    /// http, sse: extra request headers (they never replace protocol headers).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Name prefix (`PREFIX__tool`, `PREFIX+uri`); default the backend name; `""`
    /// exposes names unprefixed.
    pub prefix: Option<String>,
    /// Per-call timeout; default `server.request_timeout`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Option<Duration>,
    /// `shared` (one connection for every host session), `per_session` (one per host
    /// session; default for http and sse) or `auto` (shared until the backend shows
    /// it keeps state per client, then per_session for new sessions; default for stdio).
    pub mode: Option<ConnectionMode>,
    /// `auto` (probe with `server/discover`, default), `legacy` (always
    /// `initialize`) or `modern` (2026-07-28, stateless: no `initialize`).
    #[serde(default)]
    pub era: BackendEra,
    /// Tool filters and curation.
    #[serde(default)]
    pub tools: ToolFilter,
    /// Whether `/readyz` waits for this backend. Default false.
    #[serde(default)]
    pub required: bool,
    /// Most calls in flight to this backend at once; more wait in a queue.
    pub max_concurrency: Option<usize>,
    /// How long a call may wait for a free slot before failing ("busy"). Default 5 s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub queue_timeout: Option<Duration>,
    /// per_session mode: most connections open at once. Default 256.
    pub max_connections: Option<usize>,
    /// per_session mode: most connections one client holds (its sessions' own and
    /// its stateless pool's), so that one client cannot take the whole
    /// `max_connections` budget. The client is the principal (`iss`, `sub`), or on
    /// an open endpoint the client address (behind a proxy, set
    /// `server.trusted_proxies`). Over it, the call that would open a session's
    /// connection gets a "busy" error (-32603). Default a quarter of
    /// `max_connections`, rounded up.
    pub max_connections_per_client: Option<usize>,
    /// per_session mode, stateless 2026-07-28 requests: most pooled connections of
    /// one pool key (backend, caller, declared capabilities) starting at once;
    /// other requests of the key wait, up to `queue_timeout`, for one to be ready
    /// or free. Default 2.
    pub pool_max_starting: Option<usize>,
    /// per_session mode: a pooled connection (stateless 2026-07-28 requests)
    /// unused this long is closed. Default 60 s.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub pool_idle_timeout: Option<Duration>,
    /// per_session mode: when opening a connection would go over the client's
    /// `max_connections_per_client` (or `max_connections`), a session's own
    /// connection unused at least this long — no call in flight, no
    /// subscription or task of its session on it — is closed to make room
    /// (the client's least recently used; for `max_connections`, any
    /// client's) instead of refusing the call; its session's next call opens
    /// a fresh one (log level and subscriptions set again); what the backend
    /// kept for that session (a per_session backend's reason to be) is lost.
    /// Default 5 min; up to `server.session_idle_timeout` to refuse instead.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub reclaim_idle_after: Option<Duration>,
    /// per_session (and auto, once it serves sessions their own) backends, stdio
    /// or http: a session's own connection unused this long is closed and reopens
    /// on the next call. At least `server.session_idle_timeout`. Default when
    /// unset: it lives as long as its session. When set, it is reopened with the
    /// session's log level and subscriptions, and one holding subscriptions or
    /// tasks is kept. Pooled connections follow `pool_idle_timeout`; the shared
    /// connection is never closed for idleness.
    #[serde(default, with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub idle_timeout: Option<Duration>,
    /// http, sse: a file of `Name: value` header lines (mounted secrets), read at
    /// each connect and merged over `headers`.
    pub headers_file: Option<PathBuf>,
    /// http, sse: how the gateway authenticates to the backend (its own
    /// credentials; the host's token is never forwarded).
    pub auth: Option<UpstreamAuthConfig>,
    /// What the access log line says about a `tools/call`'s arguments (default:
    /// nothing).
    #[serde(default)]
    pub audit: ArgumentAudit,
    /// Count routed `tools/call`s per exposed tool (`mcpgate_tool_calls_total`,
    /// `mcpgate_tool_call_duration_seconds`; label values only from the catalogue).
    /// Default false: one more series per tool and outcome.
    #[serde(default)]
    pub tool_metrics: bool,
    /// With `[cluster] redis`, stdio backends serving sessions their own
    /// (`per_session`, or `auto` once switched): a session's child runs on
    /// one replica (its owner); when that replica dies, the next replica that
    /// needs the child either starts a new one with the session's log level
    /// (`respawn`, default) or ends the session, so the host gets 404 and
    /// knows the child's state is gone (`end_session`).
    #[serde(default)]
    pub on_owner_loss: OwnerLoss,
}

/// `tools.include` / `tools.exclude` glob lists (matched against original names).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    /// When non-empty, only tools matching one of these globs are exposed.
    #[serde(default)]
    pub include: Vec<String>,
    /// Tools matching one of these globs are hidden.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Curation by original tool name: rename, title/description, hidden arguments.
    #[serde(default)]
    pub overrides: BTreeMap<String, ToolOverride>,
}

/// `tools.overrides.NAME`: how one backend tool is presented to hosts.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// Exposed name instead of the original (still prefixed; name rules apply).
    pub name: Option<String>,
    /// `title` shown to hosts.
    pub title: Option<String>,
    /// `description` shown to hosts.
    pub description: Option<String>,
    /// Fixed argument values, set on every `tools/call` (host values replaced)
    /// and removed from the exposed `inputSchema`.
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl BackendConfig {
    /// The effective prefix.
    pub fn prefix<'a>(&'a self, name: &'a str) -> &'a str {
        self.prefix.as_deref().unwrap_or(name)
    }

    /// The effective connection mode.
    pub fn mode(&self) -> ConnectionMode {
        self.mode.unwrap_or(match self.transport {
            Transport::Stdio { .. } => ConnectionMode::Auto,
            Transport::Http { .. } | Transport::Sse { .. } => ConnectionMode::PerSession,
        })
    }
}
