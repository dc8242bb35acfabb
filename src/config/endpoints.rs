//! `[endpoints.NAME]`: virtual endpoints, several MCP servers on one listener.
//!
//! Each endpoint is its own path with its own catalogue (a chosen set of backends and
//! tools), its own sessions (a session opened at one path is unknown at another) and,
//! with `[auth]`, its own required scopes and RFC 9728 protected resource metadata.
//! Without any `[endpoints]` the gateway serves one endpoint at `server.path`
//! with every backend.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Config, ConfigProblem};

/// `[endpoints.NAME]`: one virtual endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// The endpoint's path on the listener, e.g. `/mcp/eng` (absolute; no query,
    /// fragment or space; not `/healthz`, `/readyz` nor under `/.well-known/`).
    pub path: String,
    /// Backend name globs served here. Default: every backend.
    pub backends: Option<Vec<String>>,
    /// Globs over the backends' own tool names served here. Default: every tool of
    /// the endpoint's backends.
    pub tools: Option<Vec<String>>,
    /// Globs over the backends' own tool names never served here (wins over `tools`).
    #[serde(default)]
    pub exclude_tools: Vec<String>,
    /// OAuth scopes a token must hold to use this endpoint, besides
    /// `auth.required_scopes` (HTTP 403 `insufficient_scope` otherwise, RFC 6750
    /// §3.1). Needs `[auth]`.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The endpoint's resource identifier (RFC 9728 `resource`, RFC 8707): tokens
    /// used here must name it or `auth.resource` in their audience. Default: the
    /// origin of `auth.resource` followed by `path`. Needs `[auth]`.
    pub resource: Option<String>,
}

/// Paths the gateway serves itself.
const RESERVED: [&str; 2] = ["/healthz", "/readyz"];

/// Checks `[endpoints]` against the rest of the config.
pub fn validate(c: &Config, p: &mut Vec<ConfigProblem>) {
    let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, e) in &c.endpoints {
        let at = |f: &str| format!("endpoints.{name}.{f}");
        if !super::is_valid_prefix(name) {
            p.push(ConfigProblem::new(
                format!("endpoints.{name}"),
                "the name must start with a letter and use only letters, digits, '-' and '_'",
            ));
        }
        let path = e.path.trim_end_matches('/');
        if !e.path.starts_with('/') || e.path.contains(['?', '#', ' ']) {
            p.push(ConfigProblem::new(
                at("path"),
                "must start with '/' and contain no query, fragment or space",
            ));
        } else if RESERVED.contains(&path) || path.starts_with("/.well-known") {
            p.push(ConfigProblem::new(
                at("path"),
                "is a path the gateway serves itself (/healthz, /readyz, /.well-known/…)",
            ));
        } else if let Some(other) = paths.insert(path, name) {
            p.push(ConfigProblem::new(
                at("path"),
                format!("is also the path of endpoints.{other}"),
            ));
        }
        for (field, list) in [
            ("backends", e.backends.as_deref().unwrap_or_default()),
            ("tools", e.tools.as_deref().unwrap_or_default()),
            ("exclude_tools", e.exclude_tools.as_slice()),
        ] {
            for (i, g) in list.iter().enumerate() {
                if let Err(err) = globset::Glob::new(g) {
                    p.push(ConfigProblem::new(
                        format!("endpoints.{name}.{field}[{i}]"),
                        format!("invalid glob: {err}"),
                    ));
                } else if field == "backends"
                    && !g.contains(['*', '?', '[', '{'])
                    && !c.backends.contains_key(g)
                {
                    p.push(ConfigProblem::new(
                        format!("endpoints.{name}.backends[{i}]"),
                        format!("no backend is named {g:?}"),
                    ));
                }
            }
        }
        if c.auth.is_none() && (!e.scopes.is_empty() || e.resource.is_some()) {
            p.push(ConfigProblem::new(
                at(if e.scopes.is_empty() {
                    "resource"
                } else {
                    "scopes"
                }),
                "needs [auth] (without it no token is read)",
            ));
        }
        if let Some(r) = &e.resource
            && url::Url::parse(r).map_or(true, |u| !matches!(u.scheme(), "https" | "http"))
        {
            p.push(ConfigProblem::new(
                at("resource"),
                "must be an absolute http(s) URL",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    fn problems(text: &str) -> Vec<String> {
        let env = |n: &str| (n == "X").then(|| "x".to_string());
        match Config::parse(text, Path::new("t.toml"), &env) {
            Ok(_) => Vec::new(),
            Err(p) => p.iter().map(|p| p.to_string()).collect(),
        }
    }

    const BACKENDS: &str = r#"
[backends.demo]
type = "stdio"
command = "demo"
[backends.git]
type = "stdio"
command = "git"
"#;

    #[test]
    fn valid_endpoints_parse() {
        let text = format!(
            r#"{BACKENDS}
[endpoints.eng]
path = "/mcp/eng"
backends = ["demo", "g*"]
tools = ["echo", "add"]
exclude_tools = ["delete_*"]
[endpoints.ops]
path = "/mcp/ops"
"#
        );
        assert_eq!(problems(&text), Vec::<String>::new());
        let env = |_: &str| None;
        let c = Config::parse(&text, Path::new("t.toml"), &env).unwrap();
        assert_eq!(c.endpoints.len(), 2);
        assert_eq!(c.endpoints["eng"].exclude_tools, ["delete_*"]);
    }

    #[test]
    fn bad_endpoints_name_their_fields() {
        let text = format!(
            r#"{BACKENDS}
[endpoints.a]
path = "mcp"
[endpoints.b]
path = "/x"
backends = ["nope", "[bad"]
scopes = ["s"]
[endpoints.c]
path = "/x/"
[endpoints.d]
path = "/healthz"
resource = "ftp://x"
"#
        );
        let got = problems(&text);
        for want in [
            "endpoints.a.path: must start with '/'",
            "endpoints.b.backends[0]: no backend is named \"nope\"",
            "endpoints.b.backends[1]: invalid glob",
            "endpoints.b.scopes: needs [auth]",
            "endpoints.c.path: is also the path of endpoints.b",
            "endpoints.d.path: is a path the gateway serves itself",
            "endpoints.d.resource: needs [auth]",
        ] {
            assert!(
                got.iter().any(|g| g.starts_with(want)),
                "{want:?} missing from {got:#?}"
            );
        }
    }
}
