//! Semantic validation of a parsed [`Config`]; returns every problem at once.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{BackendConfig, BackendKind, Config, RawConfig, Transport};

/// One configuration problem, tagged with the field path it concerns
/// (e.g. `backends.github.url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted field path; empty for whole-file problems.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigProblem {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigProblem {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A syntax or shape problem reported by the parser.
    pub fn syntax(e: &dyn fmt::Display) -> Self {
        ConfigProblem::new("", e.to_string().trim().to_string())
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Whether `s` is a valid backend name or prefix: an ASCII letter, then letters,
/// digits, `-` or single `_`; no `__` (the namespacing separator) and no trailing `_`.
pub fn is_valid_prefix(s: &str) -> bool {
    s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !s.contains("__")
        && !s.ends_with('_')
}

/// The URI-scheme form of a prefix (`_` is not allowed in an RFC 3986 scheme).
pub fn uri_prefix(prefix: &str) -> String {
    prefix.replace('_', "-")
}

/// Turns the file's shape into a [`Config`], reporting fields that do not fit the
/// backend's `type` (missing `command`/`url`, or fields of the other transport).
pub(super) fn build(raw: RawConfig, p: &mut Vec<ConfigProblem>) -> Config {
    let mut backends = std::collections::BTreeMap::new();
    for (name, b) in raw.backends {
        let at = |f: &str| format!("backends.{name}.{f}");
        let transport = match b.kind {
            BackendKind::Stdio => {
                for (f, set) in [
                    ("url", b.url.is_some()),
                    ("headers", !b.headers.is_empty()),
                    ("headers_file", b.headers_file.is_some()),
                    ("auth", b.auth.is_some()),
                ] {
                    if set {
                        p.push(ConfigProblem::new(at(f), "not allowed for type \"stdio\""));
                    }
                }
                match b.command.as_deref().map(str::trim) {
                    None => p.push(ConfigProblem::new(
                        at("command"),
                        "required for type \"stdio\"",
                    )),
                    Some("") => p.push(ConfigProblem::new(at("command"), "must not be empty")),
                    Some(_) => {}
                }
                Transport::Stdio {
                    command: b.command.unwrap_or_default(),
                    args: b.args,
                    env: b.env,
                    cwd: b.cwd,
                }
            }
            BackendKind::Http | BackendKind::Sse => {
                let kind = if b.kind == BackendKind::Http {
                    "http"
                } else {
                    "sse"
                };
                for (f, set) in [
                    ("command", b.command.is_some()),
                    ("args", !b.args.is_empty()),
                    ("env", !b.env.is_empty()),
                    ("cwd", b.cwd.is_some()),
                ] {
                    if set {
                        p.push(ConfigProblem::new(
                            at(f),
                            format!("not allowed for type {kind:?}"),
                        ));
                    }
                }
                if b.url.is_none() {
                    p.push(ConfigProblem::new(
                        at("url"),
                        format!("required for type {kind:?}"),
                    ));
                }
                if b.kind == BackendKind::Sse && b.era == super::BackendEra::Modern {
                    p.push(ConfigProblem::new(
                        at("era"),
                        "\"modern\" is not allowed for type \"sse\" (HTTP+SSE is a 2024-11-05 transport)",
                    ));
                }
                let (url, headers) = (b.url.unwrap_or_default(), b.headers);
                if b.kind == BackendKind::Http {
                    Transport::Http { url, headers }
                } else {
                    Transport::Sse { url, headers }
                }
            }
        };
        let backend = BackendConfig {
            transport,
            prefix: b.prefix,
            timeout: b.timeout,
            mode: b.mode,
            era: b.era,
            tools: b.tools,
            required: b.required,
            max_concurrency: b.max_concurrency,
            queue_timeout: b.queue_timeout.unwrap_or(std::time::Duration::from_secs(5)),
            max_connections: b.max_connections.unwrap_or(256),
            max_connections_per_client: b
                .max_connections_per_client
                .unwrap_or_else(|| b.max_connections.unwrap_or(256).div_ceil(4)),
            pool_max_starting: b.pool_max_starting.unwrap_or(2),
            pool_idle_timeout: b
                .pool_idle_timeout
                .unwrap_or(std::time::Duration::from_secs(60)),
            reclaim_idle_after: b
                .reclaim_idle_after
                .unwrap_or(std::time::Duration::from_secs(300)),
            idle_timeout: b.idle_timeout,
            headers_file: b.headers_file,
            upstream_auth: b.auth,
            audit: b.audit,
            tool_metrics: b.tool_metrics,
            on_owner_loss: b.on_owner_loss,
        };
        backends.insert(name, backend);
    }
    Config {
        server: raw.server,
        backends,
        auth: raw.auth,
        policy: raw.policy,
        cluster: raw.cluster,
        telemetry: raw.telemetry,
        endpoints: raw.endpoints,
    }
}

/// Checks a parsed config; an empty result means valid.
pub fn validate(c: &Config) -> Vec<ConfigProblem> {
    let mut p = Vec::new();
    super::telemetry::validate(&c.telemetry, &mut p);
    super::endpoints::validate(c, &mut p);
    let s = &c.server;
    if !s.path.starts_with('/') || s.path.contains(['?', '#', ' ']) {
        p.push(ConfigProblem::new(
            "server.path",
            "must start with '/' and contain no query, fragment or space",
        ));
    }
    if !(24..=128).contains(&s.max_name_len) {
        p.push(ConfigProblem::new(
            "server.max_name_len",
            "must be between 24 and 128 (MCP 2025-11-25 tool names are at most 128)",
        ));
    }
    for (field, v) in [
        ("server.page_size", s.page_size),
        ("server.max_sessions", s.max_sessions),
        ("server.max_sessions_per_client", s.sessions_per_client()),
    ] {
        if v == 0 {
            p.push(ConfigProblem::new(field, "must be at least 1"));
        }
    }
    if s.max_body_bytes < 1024 {
        p.push(ConfigProblem::new(
            "server.max_body_bytes",
            "must be at least 1024",
        ));
    }
    for (field, d) in [
        ("server.session_idle_timeout", s.session_idle_timeout),
        ("server.sse_keep_alive", s.sse_keep_alive),
        ("server.request_timeout", s.request_timeout),
        ("server.backend_ping_interval", s.backend_ping_interval),
        ("server.header_read_timeout", s.header_read_timeout),
        ("server.body_read_timeout", s.body_read_timeout),
        (
            "cluster.session_max_lifetime",
            c.cluster.session_max_lifetime,
        ),
        ("cluster.heartbeat", c.cluster.heartbeat),
    ] {
        if d.is_zero() {
            p.push(ConfigProblem::new(field, "must be greater than zero"));
        }
    }
    if let Some(url) = &c.cluster.redis {
        // An unreadable key file is a problem of its own (cluster.session_keys_file).
        let keys = !c.cluster.keys.is_empty() || c.cluster.session_keys_file.is_some();
        p.extend(redis_problem(url, keys));
    }
    if let Some(r) = &s.rate_limit
        && (r.per_second == 0 || r.burst == Some(0))
    {
        p.push(ConfigProblem::new(
            "server.rate_limit",
            "per_second and burst must be at least 1",
        ));
    }
    if s.max_streams_per_session == 0 {
        p.push(ConfigProblem::new(
            "server.max_streams_per_session",
            "must be at least 1",
        ));
    }
    for (i, o) in s.allowed_origins.iter().enumerate() {
        if o != "*" && !is_origin(o) {
            p.push(ConfigProblem::new(
                format!("server.allowed_origins[{i}]"),
                format!("{o:?} is not an origin (scheme://host[:port]) or \"*\""),
            ));
        }
    }
    for (i, t) in s.trusted_proxies.iter().enumerate() {
        if let Err(why) = parse_trusted_proxy(t) {
            p.push(ConfigProblem::new(
                format!("server.trusted_proxies[{i}]"),
                why,
            ));
        }
    }
    let mut prefixes: BTreeMap<String, &str> = BTreeMap::new();
    let mut unprefixed = 0;
    for (name, b) in &c.backends {
        let at = |f: &str| format!("backends.{name}.{f}");
        if !is_valid_prefix(name) {
            p.push(ConfigProblem::new(
                format!("backends.{name}"),
                "backend names start with a letter and use letters, digits, '-' and single '_' (at most 64)",
            ));
        }
        let prefix = b.prefix(name);
        if prefix.is_empty() {
            unprefixed += 1;
        } else if !is_valid_prefix(prefix) {
            p.push(ConfigProblem::new(
                at("prefix"),
                "a prefix starts with a letter and uses letters, digits, '-' and single '_', no \"__\"",
            ));
        } else if let Some(other) = prefixes.insert(uri_prefix(prefix).to_lowercase(), name) {
            p.push(ConfigProblem::new(
                at("prefix"),
                format!("prefix {prefix:?} is also used by backend {other:?}"),
            ));
        }
        for (field, v) in [
            ("max_connections", b.max_connections),
            ("max_connections_per_client", b.max_connections_per_client),
            ("pool_max_starting", b.pool_max_starting),
        ] {
            if v == 0 {
                p.push(ConfigProblem::new(at(field), "must be at least 1"));
            }
        }
        if b.pool_idle_timeout.is_zero() {
            p.push(ConfigProblem::new(
                at("pool_idle_timeout"),
                "must be more than 0",
            ));
        }
        if let Some(idle) = b.idle_timeout
            && idle < s.session_idle_timeout
        {
            let fmt = humantime_serde::re::humantime::format_duration;
            let ttl = fmt(s.session_idle_timeout);
            p.push(ConfigProblem::new(
                at("idle_timeout"),
                format!(
                    "{} is shorter than server.session_idle_timeout ({ttl}): a per-session connection would be closed while its session is alive, losing the backend's state for it; remove idle_timeout (the connection then lives as long as its session) or make it at least {ttl}",
                    fmt(idle)
                ),
            ));
        }
        if b.max_concurrency == Some(0) {
            p.push(ConfigProblem::new(
                at("max_concurrency"),
                "must be at least 1",
            ));
        }
        if b.timeout.is_some_and(|t| t.is_zero()) {
            p.push(ConfigProblem::new(
                at("timeout"),
                "must be greater than zero",
            ));
        }
        match &b.transport {
            Transport::Stdio { .. } => {}
            Transport::Http { url, .. } | Transport::Sse { url, .. } if url.is_empty() => {}
            Transport::Http { url, headers } | Transport::Sse { url, headers } => {
                match url::Url::parse(url) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                    Ok(_) => p.push(ConfigProblem::new(at("url"), "must be an http(s) URL")),
                    Err(e) => p.push(ConfigProblem::new(at("url"), format!("invalid URL: {e}"))),
                }
                for (h, v) in headers {
                    if crate::streamable_http::is_transport_header(h) {
                        p.push(ConfigProblem::new(
                            at(&format!("headers.{h}")),
                            "protocol headers are set by the gateway and cannot be configured",
                        ));
                        continue;
                    }
                    if axum::http::HeaderName::try_from(h.as_str()).is_err() {
                        p.push(ConfigProblem::new(
                            at(&format!("headers.{h}")),
                            "invalid header name",
                        ));
                    } else if axum::http::HeaderValue::try_from(v.as_str()).is_err() {
                        p.push(ConfigProblem::new(
                            at(&format!("headers.{h}")),
                            "invalid header value",
                        ));
                    }
                }
            }
        }
        for (list, globs) in [("include", &b.tools.include), ("exclude", &b.tools.exclude)] {
            for (i, g) in globs.iter().enumerate() {
                if let Err(e) = globset::Glob::new(g) {
                    p.push(ConfigProblem::new(
                        at(&format!("tools.{list}[{i}]")),
                        format!("invalid glob: {e}"),
                    ));
                }
            }
        }
    }
    super::auth::validate(c, &mut p);
    validate_overrides(c, &mut p);
    if unprefixed > 0 && c.backends.len() > 1 {
        tracing::debug!(
            unprefixed,
            "unprefixed backends: name collisions are resolved deterministically"
        );
    }
    p
}

/// Curated names obey the exposed-name rules (MCP 2025-11-25 server/tools) and
/// stay distinct within their backend.
fn validate_overrides(c: &Config, p: &mut Vec<ConfigProblem>) {
    let max = c.server.max_name_len;
    for (name, b) in &c.backends {
        let prefix = b.prefix(name);
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (original, o) in &b.tools.overrides {
            let Some(new) = o.name.as_deref() else {
                continue;
            };
            let at = format!("backends.{name}.tools.overrides.{original}.name");
            let full = if prefix.is_empty() {
                new.to_owned()
            } else {
                format!("{prefix}__{new}")
            };
            if !crate::mcp::names::is_valid_name(&full, max) {
                p.push(ConfigProblem::new(
                    &at,
                    format!("{full:?} is not a valid tool name: 1-{max} characters from A-Z a-z 0-9 _ - ."),
                ));
            }
            if let Some(other) = seen.insert(new, original) {
                p.push(ConfigProblem::new(
                    &at,
                    format!("{new:?} is also the new name of {other:?}"),
                ));
            }
        }
    }
}

fn is_origin(s: &str) -> bool {
    match url::Url::parse(s) {
        Ok(u) => {
            u.host().is_some()
                && u.path() == "/"
                && !s.ends_with('/')
                && u.query().is_none()
                && u.fragment().is_none()
        }
        Err(_) => false,
    }
}

/// Parses one `server.trusted_proxies` entry: a CIDR (`10.0.0.0/8`, `fd00::/8`) or
/// a single address (`10.1.2.3`, taken as `/32` or `/128`).
///
/// Errors: a description of what is wrong, for the config problem.
pub fn parse_trusted_proxy(entry: &str) -> Result<IpNet, String> {
    let entry = entry.trim();
    if let Ok(net) = entry.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    entry
        .parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{entry:?} is not an IP address or CIDR network"))
}

/// What is wrong with `cluster.redis` (`with_keys`: session keys are configured):
/// a URL of scheme `redis` or `rediss` with a host, and keys, or replicas could
/// not open each other's session ids. Never quotes the URL (it may hold a
/// password).
fn redis_problem(url: &str, with_keys: bool) -> Option<ConfigProblem> {
    const FIELD: &str = "cluster.redis";
    let parsed = url::Url::parse(url).ok();
    let scheme_ok = parsed
        .as_ref()
        .is_some_and(|u| matches!(u.scheme(), "redis" | "rediss") && u.host().is_some());
    if !scheme_ok {
        return Some(ConfigProblem::new(
            FIELD,
            "expected redis://HOST[:PORT][/DB] or rediss://HOST[:PORT][/DB]",
        ));
    }
    (!with_keys).then(|| {
        ConfigProblem::new(
            FIELD,
            "a shared store needs shared session keys: set cluster.session_keys_file or MCPGATE_SESSION_KEYS",
        )
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn prefix_rules() {
        for ok in ["a", "github", "my-server", "my_server", "A1"] {
            assert!(is_valid_prefix(ok), "{ok}");
        }
        for bad in ["", "1a", "a__b", "a_", "a.b", "a/b", "café", "a b"] {
            assert!(!is_valid_prefix(bad), "{bad}");
        }
        assert_eq!(uri_prefix("my_server"), "my-server");
    }

    #[test]
    fn lists_every_problem_with_its_path() {
        let text = r#"
            [server]
            path = "mcp"
            max_name_len = 500
            allowed_origins = ["https://ok.example", "not an origin"]
            [backends."bad name"]
            type = "stdio"
            command = " "
            [backends.empty]
            type = "stdio"
            command = ""
            [backends.web]
            type = "http"
            url = "ftp://x"
            tools.include = ["[unclosed"]
            [backends.web2]
            type = "http"
            url = "http://127.0.0.1/mcp"
            prefix = "web"
        "#;
        let problems = Config::parse(text, Path::new("x.toml"), &|_| None).unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        for want in [
            "server.path",
            "server.max_name_len",
            "server.allowed_origins[1]",
            "backends.bad name",
            "backends.bad name.command",
            "backends.empty.command",
            "backends.web.url",
            "backends.web.tools.include[0]",
            "backends.web2.prefix",
        ] {
            assert!(paths.contains(&want), "missing {want} in {paths:?}");
        }
    }

    #[test]
    fn transport_headers_cannot_be_configured() {
        // Mcp-Name and Mcp-Param-* used to pass validation and be dropped with a
        // warning at connect time: the validator had its own, shorter list.
        let text = r#"
            [backends.web]
            type = "http"
            url = "http://127.0.0.1/mcp"
            headers = { "Mcp-Name" = "x", "MCP-Param-Region" = "eu", "Last-Event-ID" = "1", "X-Api-Key" = "k" }
        "#;
        let problems = Config::parse(text, Path::new("x.toml"), &|_| None).unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "backends.web.headers.Last-Event-ID",
                "backends.web.headers.MCP-Param-Region",
                "backends.web.headers.Mcp-Name",
            ]
        );
    }

    #[test]
    fn unknown_fields_and_types_name_the_field() {
        let problems =
            Config::parse("[server]\nlisten = 5\n", Path::new("x.toml"), &|_| None).unwrap_err();
        assert!(
            problems[0].to_string().contains("server.listen"),
            "{problems:?}"
        );
        let problems = Config::parse(
            "[backends.a]\ntype = \"stdio\"\ncommand = \"x\"\nbogus = 1\n",
            Path::new("x.toml"),
            &|_| None,
        )
        .unwrap_err();
        assert!(problems[0].to_string().contains("bogus"), "{problems:?}");
    }
}
