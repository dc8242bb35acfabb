//! Configuration: TOML file (or an `mcpServers` JSON file), `${VAR}` interpolation,
//! `MCPGATE_*` overrides and validation that reports every problem with its field path.

mod audit;
mod auth;
mod backends;
mod connection;
mod endpoints;
mod interpolate;
mod keys;
mod mcp_servers;
mod schema;
mod telemetry;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use audit::{ArgumentAudit, ArgumentLogging};
pub use auth::{
    AuthConfig, Effect, IssuerConfig, IssuerEntry, PolicyConfig, RuleConfig, TokenEndpointConfig,
    UpstreamAuthConfig, is_fetchable_url, is_loopback_host,
};
pub use backends::{BackendConfig, BackendKind, RawBackend, ToolFilter, ToolOverride, Transport};
pub use connection::{BackendEra, ConnectionMode, OwnerLoss};
pub use endpoints::EndpointConfig;
pub use keys::{ClusterConfig, KEYS_ENV, MAX_KID_LEN, SessionKey, parse_keys};
pub use schema::json_schema;
pub use telemetry::TelemetryConfig;
pub use validate::{ConfigProblem, is_valid_prefix, parse_trusted_proxy, uri_prefix};

/// The shipped default configuration, compiled in.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/mcpgate.toml");

/// Errors from loading a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The file was read but has problems; every one is listed with its field path.
    #[error("{} problem(s) in {}:\n{}", problems.len(), path.display(), format_problems(problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<ConfigProblem>,
    },
}

fn format_problems(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The whole gateway configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server face (toward hosts).
    pub server: ServerConfig,
    /// Backends by name (see [`validate::is_valid_prefix`] for the name rules).
    pub backends: BTreeMap<String, BackendConfig>,
    /// `[auth]`: bearer tokens on the MCP endpoint; `None` = no auth (loopback only).
    pub auth: Option<AuthConfig>,
    /// `[policy]`: who sees which backends and items.
    pub policy: PolicyConfig,
    /// `[cluster]`: the keys that seal session ids and cursors, the session lifetime.
    pub cluster: ClusterConfig,
    /// `[telemetry]`: OpenTelemetry traces (off unless `otlp_endpoint` is set).
    pub telemetry: TelemetryConfig,
    /// `[endpoints.NAME]`: virtual endpoints; empty = one endpoint at `server.path`.
    pub endpoints: BTreeMap<String, EndpointConfig>,
}

/// An mcpgate config file (TOML). Every string value may use `${VAR}` (read from the
/// environment at load; a missing variable is an error) and `$${` for a literal `${`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// `[server]`: the Streamable HTTP endpoint offered to hosts.
    #[serde(default)]
    server: ServerConfig,
    /// `[backends.NAME]`: the MCP servers behind the gateway, by name.
    #[serde(default)]
    backends: BTreeMap<String, RawBackend>,
    /// `[auth]`: bearer tokens on the MCP endpoint (OAuth 2.1 protected resource).
    /// Absent: no tokens, and only a loopback listen address is allowed.
    auth: Option<AuthConfig>,
    /// `[policy]`: who sees which backends, tools, prompts and resources.
    #[serde(default)]
    policy: PolicyConfig,
    /// `[cluster]`: the keys that seal session ids and cursors, so that replicas
    /// (and a restarted process) share sessions; the absolute session lifetime.
    #[serde(default)]
    cluster: ClusterConfig,
    /// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP; off unless
    /// `otlp_endpoint` is set.
    #[serde(default)]
    telemetry: TelemetryConfig,
    /// `[endpoints.NAME]`: several MCP endpoints on the listener, each its own path,
    /// backends, tools, sessions and scopes. Absent: one at `server.path`, all backends.
    #[serde(default)]
    endpoints: BTreeMap<String, EndpointConfig>,
}

/// `[server]`: the Streamable HTTP endpoint offered to hosts.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Listen address. Default `127.0.0.1:8080` (MCP 2025-11-25 transports: bind
    /// loopback when running locally). A reload keeps it: a change needs a restart.
    #[schemars(schema_with = "schema::socket_addr")]
    pub listen: SocketAddr,
    /// Endpoint path. Default `/mcp`.
    pub path: String,
    /// Browser origins allowed besides loopback origins (which are allowed when the
    /// listen address is loopback). Exact `scheme://host[:port]` strings, or `*`.
    pub allowed_origins: Vec<String>,
    /// Extra `Host` header values accepted on a loopback bind (DNS-rebinding guard).
    pub allowed_hosts: Vec<String>,
    /// Proxies (load balancers) whose `X-Forwarded-For` names the client: CIDR
    /// networks or single addresses, e.g. `["10.0.0.0/8"]`. The client address
    /// (per-IP rate limit, access log) is then the rightmost entry that is not a
    /// trusted proxy. Default empty: the TCP peer is the client.
    pub trusted_proxies: Vec<String>,
    /// Sessions idle longer than this are ended. Default 30 minutes.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub session_idle_timeout: Duration,
    /// Maximum concurrent host sessions. At it, `initialize` ends the oldest
    /// session that was never used (no request after `initialize`) and is a
    /// few seconds old; when there is none it gets HTTP 503 + `Retry-After`.
    /// Default 10,000.
    pub max_sessions: usize,
    /// Most sessions one client holds: the principal (`iss`, `sub`), or on an
    /// open endpoint the client address (behind a proxy, set
    /// `trusted_proxies`). At it, `initialize` ends that client's oldest
    /// never-used session (a few seconds old), else gets HTTP 429 +
    /// `Retry-After`. Default a quarter of `max_sessions` rounded up, at
    /// least 100 (or `max_sessions` when that is less).
    pub max_sessions_per_client: Option<usize>,
    /// Maximum request body in bytes (HTTP 413 beyond, at once when the
    /// `Content-Length` announces more). Default 4 MiB.
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's headers; also how long an
    /// idle keep-alive connection is kept. The connection is closed beyond it
    /// (slowloris guard). Default 30 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body (HTTP 408 beyond).
    /// Default 30 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub body_read_timeout: Duration,
    /// Items per page in `*/list` results served to hosts. Default 100.
    pub page_size: usize,
    /// Maximum exposed tool/prompt name length, 1..=128 (MCP 2025-11-25 tools: ≤128;
    /// some hosts cap function names at 64). Longer names are shortened deterministically.
    pub max_name_len: usize,
    /// How long a POST waits for the backend's answer before switching the response
    /// from `application/json` to an SSE stream. Default 100 ms.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub json_response_window: Duration,
    /// Interval of SSE keep-alive comments on idle streams. Default 15 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub sse_keep_alive: Duration,
    /// Default per-call timeout toward backends. Default 60 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub request_timeout: Duration,
    /// Address of the Prometheus `/metrics` listener; `"off"` disables it.
    /// Default `127.0.0.1:9464`; `MCPGATE_METRICS_LISTEN` overrides it; a reload keeps it.
    #[serde(with = "optional_addr")]
    #[schemars(schema_with = "schema::optional_socket_addr")]
    pub metrics_listen: Option<SocketAddr>,
    /// Also serve the read-only admin endpoints `GET /admin/backends` (state,
    /// restarts, last error per backend) and `GET /admin/catalog[?claims=JSON]`
    /// (what a principal is shown, as `mcpgate catalog --json` prints it) on the
    /// metrics listener. Never on the MCP listener. Default `false`: the metrics
    /// port is often reachable by more than the operators.
    pub admin_endpoints: bool,
    /// Per-client request rate limit (keyed by principal, or client IP when
    /// anonymous). Off by default.
    pub rate_limit: Option<RateLimit>,
    /// Most SSE streams a session may hold open at once (HTTP 429 beyond).
    /// Default 32.
    pub max_streams_per_session: usize,
    /// Interval of `ping` health checks on backends' shared connections. Default 30 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub backend_ping_interval: Duration,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT,
    /// counted from the signal. Calls still running then get a JSON-RPC error
    /// and are cancelled upstream. Default 30 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub shutdown_grace: Duration,
    /// How long the listener keeps serving after SIGTERM/SIGINT even when no
    /// request is in flight (at most `shutdown_grace`): `/readyz` answers 503
    /// from the signal on, `/healthz` 200, new sessions get 503 + `Retry-After`,
    /// existing sessions are served, so a load balancer can take the replica
    /// out before connections are refused. Default 0 s (a Kubernetes preStop
    /// sleep does the same job).
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub drain_delay: Duration,
    /// The 2026-07-28 (stateless) face of the endpoint: `"bridge"` (default:
    /// served, legacy backends bridged), `"native"` (served only while every
    /// backend speaks 2026-07-28; otherwise as `"off"`), `"off"` (a 2026-07-28
    /// probe gets 400 naming the session-based revisions, so clients fall back).
    pub modern: ModernFace,
    /// How long a 2026-07-28 call answered `input_required` waits for the client's
    /// retry before it is cancelled at the backend, and how long a session gets to
    /// answer one round of a 2026-07-28 backend's `input_required` (asked as
    /// requests on its call's stream) before the call fails. Default 10 minutes.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub input_required_timeout: Duration,
}

/// `[server] modern`: whether the stateless 2026-07-28 revision is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModernFace {
    /// Served; legacy backends are bridged.
    #[default]
    Bridge,
    /// Served only while every backend speaks 2026-07-28.
    Native,
    /// Not served: probes are refused so that clients use `initialize`.
    Off,
}

/// `[server.rate_limit]`: a token bucket per client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: u32,
    /// Burst size (requests allowed at once). Default: `per_second`.
    pub burst: Option<u32>,
}

/// `"off"` (or `""`) ↔ `None`; otherwise a socket address.
mod optional_addr {
    use std::net::SocketAddr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        let s = String::deserialize(d)?;
        match s.trim() {
            "" | "off" => Ok(None),
            other => other.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }

    #[allow(dead_code)]
    pub fn serialize<S: Serializer>(v: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(a) => s.serialize_str(&a.to_string()),
            None => s.serialize_str("off"),
        }
    }
}

impl ServerConfig {
    /// `max_sessions_per_client`, or its default: a quarter of
    /// `max_sessions` rounded up, at least 100 (at most `max_sessions`: a small
    /// cap is not split further).
    pub fn sessions_per_client(&self) -> usize {
        self.max_sessions_per_client.unwrap_or_else(|| {
            let quarter = self.max_sessions.div_ceil(4).max(100);
            quarter.min(self.max_sessions)
        })
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            path: "/mcp".into(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            session_idle_timeout: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            max_sessions_per_client: None,
            max_body_bytes: 4 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            page_size: 100,
            max_name_len: 128,
            json_response_window: Duration::from_millis(100),
            sse_keep_alive: Duration::from_secs(15),
            request_timeout: Duration::from_secs(60),
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9464))),
            admin_endpoints: false,
            shutdown_grace: Duration::from_secs(30),
            drain_delay: Duration::ZERO,
            backend_ping_interval: Duration::from_secs(30),
            rate_limit: None,
            max_streams_per_session: 32,
            modern: ModernFace::Bridge,
            input_required_timeout: Duration::from_secs(600),
        }
    }
}

impl Config {
    /// Loads, interpolates and validates a config file. `.json` files (or files whose
    /// first non-blank byte is `{`) are read as `mcpServers` JSON.
    ///
    /// Errors: [`ConfigError::Read`] when unreadable; [`ConfigError::Invalid`] listing
    /// every problem (syntax, unknown fields, missing `${VAR}`, invalid values).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            path: path.to_owned(),
            cause,
        })?;
        Config::from_text(&text, path)
    }

    /// The default configuration compiled into the binary (`config/mcpgate.toml`:
    /// the built-in demo backend), used by `serve` when no file is given and
    /// `config/mcpgate.toml` does not exist in the working directory.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::from_text(
            EMBEDDED_DEFAULT,
            Path::new("<embedded config/mcpgate.toml>"),
        )
    }

    fn from_text(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let env = |name: &str| match name {
            "MCPGATE_EXE" => std::env::current_exe()
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            _ => std::env::var(name).ok(),
        };
        Config::parse(text, path, &env).map_err(|problems| ConfigError::Invalid {
            path: path.to_owned(),
            problems,
        })
    }

    /// Parses config text; `env` resolves `${VAR}` (and `MCPGATE_*` overrides).
    pub fn parse(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Vec<ConfigProblem>> {
        let is_json =
            path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
        let mut value = if is_json {
            mcp_servers::to_toml_value(text)?
        } else {
            toml::from_str::<toml::Value>(text).map_err(|e| vec![ConfigProblem::syntax(&e)])?
        };
        let mut problems = Vec::new();
        interpolate::interpolate(&mut value, "", env, &mut problems);
        if let Some(listen) = env("MCPGATE_LISTEN") {
            interpolate::set_server_field(&mut value, "listen", toml::Value::String(listen));
        }
        if let Some(listen) = env("MCPGATE_METRICS_LISTEN") {
            interpolate::set_server_field(
                &mut value,
                "metrics_listen",
                toml::Value::String(listen),
            );
        }
        let mut config = match serde_path_to_error::deserialize::<_, RawConfig>(value) {
            Ok(raw) => Some(validate::build(raw, &mut problems)),
            Err(e) => {
                let path = e.path().to_string();
                let path = if path == "." { String::new() } else { path };
                let message = e.into_inner().to_string();
                let message = message.lines().next().unwrap_or_default().to_string();
                problems.push(ConfigProblem::new(path, message));
                None
            }
        };
        if let Some(config) = config.as_mut() {
            config.cluster.keys = keys::load(&config.cluster, env, &mut problems);
            problems.extend(validate::validate(config));
        }
        match config {
            Some(c) if problems.is_empty() => Ok(c),
            _ => Err(problems),
        }
    }
}

#[cfg(test)]
mod tests;
