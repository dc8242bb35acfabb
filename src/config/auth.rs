//! `[auth]` (the gateway as an OAuth 2.1 protected resource, MCP 2025-11-25
//! basic/authorization), `[policy]` (who sees which backends and items) and a
//! backend's `auth` table (the gateway's own credentials toward an HTTP backend).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::ConfigProblem;

/// `[auth]`. Present with `issuers` = bearer tokens are required on the MCP
/// endpoint; present with only `allow_unauthenticated = true` = explicitly open.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Canonical URL of the MCP endpoint as hosts reach it (RFC 8707 resource
    /// indicator, RFC 9728 `resource`). It is also the required token audience.
    pub resource: Option<String>,
    /// Trusted authorization servers, by issuer URL (or a table with overrides).
    #[serde(default)]
    pub issuers: Vec<IssuerEntry>,
    /// Scopes every token must carry (403 `insufficient_scope` otherwise).
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// `scopes_supported` in the metadata; default: required scopes and the
    /// scopes named by policy rules.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Serve the MCP endpoint without tokens even on a non-loopback address.
    /// Only valid without `issuers`.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Accepted JWS algorithms (asymmetric only: keys come from JWKS).
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` / `nbf`.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    #[schemars(schema_with = "super::schema::duration")]
    pub leeway: Duration,
    /// JWKS are re-fetched this often (keys rotate).
    #[serde(default = "default_jwks_refresh", with = "humantime_serde")]
    #[schemars(schema_with = "super::schema::duration")]
    pub jwks_refresh_interval: Duration,
    /// A token with an unknown `kid` re-fetches the JWKS at most this often.
    #[serde(default = "default_jwks_min_refresh", with = "humantime_serde")]
    #[schemars(schema_with = "super::schema::duration")]
    pub jwks_min_refresh_interval: Duration,
    /// Timeout of every metadata, JWKS and introspection fetch.
    #[serde(default = "default_fetch_timeout", with = "humantime_serde")]
    #[schemars(schema_with = "super::schema::duration")]
    pub fetch_timeout: Duration,
    /// Also serve metadata at `/.well-known/oauth-protected-resource` describing
    /// the origin as a resource; tokens for the origin are then accepted too.
    /// Turn off when the gateway shares its origin with other services.
    #[serde(default = "yes")]
    pub root_metadata: bool,
    /// `resource_name` in the metadata.
    pub resource_name: Option<String>,
}

/// One trusted issuer: a URL, or a table.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum IssuerEntry {
    /// Issuer URL; JWKS discovered from its metadata (RFC 8414 / OIDC discovery).
    Url(String),
    /// Issuer with explicit settings.
    Table(IssuerConfig),
}

/// An issuer table.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The `iss` value, exactly.
    pub issuer: String,
    /// JWKS URL; default: `jwks_uri` from the issuer's metadata.
    pub jwks_url: Option<String>,
    /// RFC 7662 introspection endpoint, for opaque (non-JWT) tokens.
    pub introspection_url: Option<String>,
    /// Client id the gateway authenticates to the introspection endpoint with.
    pub client_id: Option<String>,
    /// Its secret (use `${VAR}`), or…
    pub client_secret: Option<String>,
    /// …a file holding it (read at use, so rotation needs no restart).
    pub client_secret_file: Option<PathBuf>,
}

impl IssuerEntry {
    /// The entry as a table.
    pub fn config(&self) -> IssuerConfig {
        match self {
            IssuerEntry::Url(u) => IssuerConfig {
                issuer: u.clone(),
                ..IssuerConfig::default()
            },
            IssuerEntry::Table(t) => t.clone(),
        }
    }
}

impl AuthConfig {
    /// Whether tokens are required (some issuer is configured).
    pub fn enabled(&self) -> bool {
        !self.issuers.is_empty()
    }
}

fn yes() -> bool {
    true
}

fn default_algorithms() -> Vec<String> {
    [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
    ]
    .map(String::from)
    .to_vec()
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

fn default_jwks_refresh() -> Duration {
    Duration::from_secs(15 * 60)
}

fn default_jwks_min_refresh() -> Duration {
    Duration::from_secs(30)
}

fn default_fetch_timeout() -> Duration {
    Duration::from_secs(5)
}

/// `[policy]`: which backends, tools, prompts and resources a caller sees.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// What an item matched by no applicable rule gets. Default `allow`.
    #[serde(default)]
    pub default: Effect,
    /// Rules; a matching `deny` beats a matching `allow`.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// Allow or deny.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Visible and usable.
    #[default]
    Allow,
    /// Absent: lists omit it and calls answer as for a non-existent item.
    Deny,
}

/// `[[policy.rules]]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Allow (default) or deny.
    #[serde(default)]
    pub effect: Effect,
    /// The rule applies to principals holding every one of these scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// …and whose token claims match: a claim equals the value, or (array claim)
    /// contains it; an array value matches any of its elements.
    #[serde(default)]
    pub claims: BTreeMap<String, Value>,
    /// Backend name globs. Default: every backend.
    #[serde(default = "any")]
    pub backends: Vec<String>,
    /// Globs over the backends' own tool names. When none of `tools`, `prompts`
    /// and `resources` is given the rule covers every item of its backends;
    /// otherwise only the kinds it names.
    pub tools: Option<Vec<String>>,
    /// Globs over the backends' own prompt names.
    pub prompts: Option<Vec<String>>,
    /// Globs over the backends' own resource URIs (also templates and reads).
    pub resources: Option<Vec<String>>,
}

fn any() -> Vec<String> {
    vec!["*".into()]
}

/// A backend's `auth` table: how the gateway authenticates to an HTTP backend.
/// The host's token is never forwarded (MCP security best practices: token
/// passthrough is forbidden).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum UpstreamAuthConfig {
    /// OAuth 2.0 client credentials (RFC 6749 §4.4): the gateway's own token.
    ClientCredentials(TokenEndpointConfig),
    /// RFC 8693 token exchange: a token for the backend obtained on behalf of
    /// the host's principal (needs `mode = "per_session"`); the catalogue
    /// connection, which serves no principal, uses client credentials.
    TokenExchange(TokenEndpointConfig),
}

/// Token endpoint settings shared by both grants.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenEndpointConfig {
    /// Token endpoint URL (https, or http on loopback).
    pub token_url: String,
    /// The gateway's client id.
    pub client_id: String,
    /// Client secret (use `${VAR}`), or…
    pub client_secret: Option<String>,
    /// …a file holding it, read at each token request.
    pub client_secret_file: Option<PathBuf>,
    /// Scopes to request.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// RFC 8707 `resource` to request the token for (the backend's URL).
    pub resource: Option<String>,
    /// RFC 8693 `audience`.
    pub audience: Option<String>,
}

impl UpstreamAuthConfig {
    /// The token endpoint settings.
    pub fn endpoint(&self) -> &TokenEndpointConfig {
        match self {
            UpstreamAuthConfig::ClientCredentials(t) | UpstreamAuthConfig::TokenExchange(t) => t,
        }
    }
}

/// Whether `url` may be fetched: https, or http to a loopback host (tests).
pub fn is_fetchable_url(url: &str) -> bool {
    match url::Url::parse(url) {
        Ok(u) => match u.scheme() {
            "https" => u.host().is_some(),
            "http" => is_loopback_host(&u),
            _ => false,
        },
        Err(_) => false,
    }
}

/// Whether the URL's host is a loopback name or address.
pub fn is_loopback_host(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Checks `[auth]`, `[policy]` and the backends' `auth` tables.
pub(super) fn validate(c: &super::Config, p: &mut Vec<ConfigProblem>) {
    if let Some(a) = &c.auth {
        validate_auth(a, p);
    }
    for (i, r) in c.policy.rules.iter().enumerate() {
        let at = |f: &str| format!("policy.rules[{i}].{f}");
        let globs = [
            ("backends", Some(&r.backends)),
            ("tools", r.tools.as_ref()),
            ("prompts", r.prompts.as_ref()),
            ("resources", r.resources.as_ref()),
        ];
        for (field, list) in globs {
            for (j, g) in list.into_iter().flatten().enumerate() {
                if let Err(e) = globset::Glob::new(g) {
                    p.push(ConfigProblem::new(
                        at(&format!("{field}[{j}]")),
                        format!("invalid glob: {e}"),
                    ));
                }
            }
        }
        for (k, v) in &r.claims {
            let ok = match v {
                Value::Array(items) => items.iter().all(is_scalar),
                v => is_scalar(v),
            };
            if !ok {
                p.push(ConfigProblem::new(
                    at(&format!("claims.{k}")),
                    "must be a string, number, boolean or an array of them",
                ));
            }
        }
        let conditional = !(r.scopes.is_empty() && r.claims.is_empty());
        if conditional && !c.auth.as_ref().is_some_and(AuthConfig::enabled) {
            p.push(ConfigProblem::new(
                at("scopes"),
                "rules with scopes or claims need [auth] issuers (no principal otherwise)",
            ));
        }
    }
    for (name, b) in &c.backends {
        let Some(a) = &b.upstream_auth else { continue };
        let at = |f: &str| format!("backends.{name}.auth.{f}");
        let t = a.endpoint();
        if !is_fetchable_url(&t.token_url) {
            p.push(ConfigProblem::new(
                at("token_url"),
                "must be an https URL (http only on loopback)",
            ));
        }
        if t.client_id.is_empty() {
            p.push(ConfigProblem::new(at("client_id"), "must not be empty"));
        }
        if t.client_secret.is_some() && t.client_secret_file.is_some() {
            p.push(ConfigProblem::new(
                at("client_secret_file"),
                "give client_secret or client_secret_file, not both",
            ));
        }
        if matches!(a, UpstreamAuthConfig::TokenExchange(_))
            && b.mode() != super::ConnectionMode::PerSession
        {
            p.push(ConfigProblem::new(
                format!("backends.{name}.mode"),
                "token_exchange acts for one principal: needs mode = \"per_session\"",
            ));
        }
    }
}

fn is_scalar(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn validate_auth(a: &AuthConfig, p: &mut Vec<ConfigProblem>) {
    if a.enabled() && a.allow_unauthenticated {
        p.push(ConfigProblem::new(
            "auth.allow_unauthenticated",
            "cannot be combined with issuers: either tokens are required or not",
        ));
    }
    if !a.enabled() && !a.allow_unauthenticated {
        p.push(ConfigProblem::new(
            "auth.issuers",
            "at least one issuer is required (or set allow_unauthenticated = true)",
        ));
    }
    match (&a.resource, a.enabled()) {
        (None, true) => p.push(ConfigProblem::new(
            "auth.resource",
            "required: the canonical URL of the MCP endpoint (also the token audience)",
        )),
        (Some(r), _) => match url::Url::parse(r) {
            Ok(u)
                if matches!(u.scheme(), "http" | "https")
                    && u.host().is_some()
                    && u.fragment().is_none()
                    && u.query().is_none() => {}
            _ => p.push(ConfigProblem::new(
                "auth.resource",
                "must be an absolute http(s) URL without query or fragment (RFC 8707 §2)",
            )),
        },
        (None, false) => {}
    }
    for (i, e) in a.issuers.iter().enumerate() {
        let cfg = e.config();
        let at = |f: &str| format!("auth.issuers[{i}]{f}");
        if !is_fetchable_url(&cfg.issuer) {
            p.push(ConfigProblem::new(
                at(""),
                "issuer must be an https URL (http only on loopback)",
            ));
        }
        for (f, u) in [
            (".jwks_url", &cfg.jwks_url),
            (".introspection_url", &cfg.introspection_url),
        ] {
            if u.as_deref().is_some_and(|u| !is_fetchable_url(u)) {
                p.push(ConfigProblem::new(
                    at(f),
                    "must be an https URL (http only on loopback)",
                ));
            }
        }
        if cfg.introspection_url.is_some() && cfg.client_id.is_none() {
            p.push(ConfigProblem::new(
                at(".client_id"),
                "required with introspection_url",
            ));
        }
    }
    for (i, alg) in a.algorithms.iter().enumerate() {
        let asymmetric = matches!(
            alg.as_str(),
            "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "ES256" | "ES384" | "EdDSA"
        );
        if !asymmetric {
            p.push(ConfigProblem::new(
                format!("auth.algorithms[{i}]"),
                format!("{alg:?} is not allowed: only asymmetric algorithms (keys come from JWKS; never none or HMAC)"),
            ));
        }
    }
    for (f, d) in [
        ("auth.jwks_refresh_interval", a.jwks_refresh_interval),
        (
            "auth.jwks_min_refresh_interval",
            a.jwks_min_refresh_interval,
        ),
        ("auth.fetch_timeout", a.fetch_timeout),
    ] {
        if d.is_zero() {
            p.push(ConfigProblem::new(f, "must be greater than zero"));
        }
    }
    if a.leeway > Duration::from_secs(300) {
        p.push(ConfigProblem::new("auth.leeway", "at most 5 minutes"));
    }
    for (i, s) in a
        .required_scopes
        .iter()
        .chain(&a.scopes_supported)
        .enumerate()
    {
        if s.is_empty() || s.contains([' ', '"', '\\']) {
            p.push(ConfigProblem::new(
                "auth.required_scopes",
                format!("scope #{i} {s:?}: a scope is a non-empty token without spaces, quotes or backslashes (RFC 6749 §3.3)"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Config;

    fn problems(text: &str) -> Vec<String> {
        match Config::parse(text, Path::new("c.toml"), &|_| None) {
            Ok(_) => Vec::new(),
            Err(p) => p.into_iter().map(|p| p.path).collect(),
        }
    }

    #[test]
    fn auth_problems_name_their_fields() {
        assert_eq!(problems("[auth]\n"), ["auth.issuers"]);
        assert!(problems("[auth]\nallow_unauthenticated = true\n").is_empty());
        let p = problems(
            r#"
            [auth]
            issuers = ["http://as.example.com", { issuer = "https://as2.example", jwks_url = "ftp://x", introspection_url = "https://as2.example/i" }]
            allow_unauthenticated = true
            algorithms = ["RS256", "HS256", "none"]
            leeway = "1h"
            [[policy.rules]]
            scopes = ["x"]
            tools = ["[bad"]
            claims = { groups = { nested = 1 } }
            "#,
        );
        for want in [
            "auth.resource",
            "auth.allow_unauthenticated",
            "auth.issuers[0]",
            "auth.issuers[1].jwks_url",
            "auth.issuers[1].client_id",
            "auth.algorithms[1]",
            "auth.algorithms[2]",
            "auth.leeway",
            "policy.rules[0].tools[0]",
            "policy.rules[0].claims.groups",
        ] {
            assert!(p.iter().any(|x| x == want), "missing {want} in {p:?}");
        }
    }

    #[test]
    fn upstream_auth_problems() {
        let p = problems(
            r#"
            [backends.a]
            type = "http"
            url = "https://a.example/mcp"
            mode = "shared"
            auth = { type = "token_exchange", token_url = "http://as.example/token", client_id = "", client_secret = "s", client_secret_file = "/f" }
            [backends.b]
            type = "stdio"
            command = "x"
            auth = { type = "client_credentials", token_url = "https://as.example/token", client_id = "gw" }
            "#,
        );
        for want in [
            "backends.a.auth.token_url",
            "backends.a.auth.client_id",
            "backends.a.auth.client_secret_file",
            "backends.a.mode",
            "backends.b.auth",
        ] {
            assert!(p.iter().any(|x| x == want), "missing {want} in {p:?}");
        }
    }
}
