//! RFC 9728 OAuth 2.0 Protected Resource Metadata for the MCP endpoint (MCP
//! 2025-11-25 basic/authorization, "Protected Resource Metadata Discovery
//! Requirements") and the `WWW-Authenticate` challenges pointing at it.
//!
//! The document for resource `https://gw.example/mcp` is served at the
//! path-inserted URL `/.well-known/oauth-protected-resource/mcp` (RFC 9728
//! §3.1), and — unless `root_metadata = false` — a document for the origin
//! resource `https://gw.example` at `/.well-known/oauth-protected-resource`.
//! Each document's `resource` is exactly the URL its location was derived from
//! (RFC 9728 §3.3); every advertised URL uses the configured external origin.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};

use super::AuthError;
use crate::config::{AuthConfig, EndpointConfig, PolicyConfig};

/// One virtual endpoint's own document (`[endpoints.NAME]`).
pub struct EndpointMetadata {
    /// The endpoint's resource identifier (the document's `resource`).
    pub resource: String,
    /// The local path serving its document (path-inserted, RFC 9728 §3.1).
    pub path: String,
    /// Its document.
    pub document: Value,
    metadata_url: String,
    /// `auth.required_scopes` and the endpoint's `scopes`.
    pub required_scopes: Vec<String>,
}

/// The well-known suffix (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata documents and where they are served.
pub struct ResourceMetadata {
    metadata_url: String,
    root: Option<String>,
    /// Local paths serving the endpoint's document.
    pub paths: Vec<String>,
    /// The endpoint's document.
    pub document: Value,
    /// The root document (origin as resource), if served.
    pub root_document: Option<Value>,
    scope_hint: Option<String>,
    /// The documents of the virtual endpoints, by name.
    pub endpoints: HashMap<String, EndpointMetadata>,
}

impl ResourceMetadata {
    /// Derives the documents from `[auth]`, the policy (for `scopes_supported`),
    /// `server.path` and `[endpoints]` (each its own document, its `resource` the
    /// endpoint's or `auth.resource`'s origin followed by its path).
    pub fn new(
        config: &AuthConfig,
        policy: &PolicyConfig,
        endpoint_path: &str,
        endpoints: &BTreeMap<String, EndpointConfig>,
    ) -> Self {
        let resource = config.resource.clone().unwrap_or_default();
        let (origin, path) = match url::Url::parse(&resource) {
            Ok(u) => (
                u.origin().ascii_serialization(),
                u.path().trim_end_matches('/').to_owned(),
            ),
            Err(_) => (String::new(), String::new()),
        };
        let metadata_url = format!("{origin}{WELL_KNOWN}{path}");
        let mut paths = vec![format!(
            "{WELL_KNOWN}{}",
            endpoint_path.trim_end_matches('/')
        )];
        let advertised = format!("{WELL_KNOWN}{path}");
        if !paths.contains(&advertised) {
            paths.push(advertised);
        }
        paths.retain(|p| p != WELL_KNOWN);
        let mut scopes: BTreeSet<&str> =
            config.scopes_supported.iter().map(String::as_str).collect();
        if scopes.is_empty() {
            scopes.extend(config.required_scopes.iter().map(String::as_str));
            for r in &policy.rules {
                scopes.extend(r.scopes.iter().map(String::as_str));
            }
        }
        let issuers: Vec<String> = config.issuers.iter().map(|i| i.config().issuer).collect();
        let doc = |resource: &str| {
            let mut d = json!({
                "resource": resource,
                "authorization_servers": issuers,
                "scopes_supported": scopes,
                "bearer_methods_supported": ["header"],
            });
            if let Some(name) = &config.resource_name {
                d["resource_name"] = name.clone().into();
            }
            d
        };
        let root = (config.root_metadata && !path.is_empty()).then(|| origin.clone());
        let endpoints = endpoints
            .iter()
            .map(|(name, e)| {
                let resource = e
                    .resource
                    .clone()
                    .unwrap_or_else(|| format!("{origin}{}", e.path.trim_end_matches('/')));
                // RFC 9728 §3.1: the document of a resource lives at its origin,
                // the well-known prefix inserted before its path.
                let (at, there) = url::Url::parse(&resource).map_or_else(
                    |_| (origin.clone(), String::new()),
                    |u| {
                        let path = u.path().trim_end_matches('/').to_owned();
                        (u.origin().ascii_serialization(), path)
                    },
                );
                let mut required = config.required_scopes.clone();
                required.extend(e.scopes.iter().cloned());
                let mut document = doc(&resource);
                let mut supported: BTreeSet<&str> = scopes.clone();
                supported.extend(e.scopes.iter().map(String::as_str));
                document["scopes_supported"] = json!(supported);
                let meta = EndpointMetadata {
                    path: format!("{WELL_KNOWN}{there}"),
                    metadata_url: format!("{at}{WELL_KNOWN}{there}"),
                    resource,
                    document,
                    required_scopes: required,
                };
                (name.clone(), meta)
            })
            .collect();
        ResourceMetadata {
            endpoints,
            document: doc(&resource),
            root_document: if path.is_empty() {
                Some(doc(&resource))
            } else {
                root.as_deref().map(doc)
            },
            scope_hint: (!config.required_scopes.is_empty())
                .then(|| config.required_scopes.join(" ")),
            metadata_url,
            root,
            paths,
        }
    }

    /// The origin resource of the root document, when it is served.
    pub fn root_resource(&self) -> Option<&str> {
        self.root.as_deref()
    }

    /// The absolute metadata URL advertised in challenges.
    #[cfg(test)]
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The `WWW-Authenticate` value for an authentication failure (RFC 6750
    /// §3, RFC 9728 §5.1): always `resource_metadata`, the `scope` hint, and the
    /// error code when a token was presented. Never a description of why.
    #[cfg(test)]
    pub fn challenge(&self, e: &AuthError) -> String {
        self.challenge_at("", e)
    }

    /// [`ResourceMetadata::challenge`] for a request at endpoint `endpoint`
    /// (`[endpoints.NAME]`, `""`: `server.path`): its document and scopes.
    pub fn challenge_at(&self, endpoint: &str, e: &AuthError) -> String {
        let (url, hint) = match self.endpoints.get(endpoint) {
            Some(m) => (
                &m.metadata_url,
                (!m.required_scopes.is_empty()).then(|| m.required_scopes.join(" ")),
            ),
            None => (&self.metadata_url, self.scope_hint.clone()),
        };
        let mut out = format!("Bearer resource_metadata=\"{url}\"");
        let (code, scope) = match e {
            AuthError::Missing => (None, hint),
            AuthError::Invalid(_) => (Some("invalid_token"), hint),
            AuthError::QueryToken => (Some("invalid_request"), hint),
            AuthError::InsufficientScope(s) => (Some("insufficient_scope"), Some(s.join(" "))),
        };
        if let Some(scope) = scope.filter(|s| !s.is_empty()) {
            out.push_str(&format!(", scope=\"{scope}\""));
        }
        if let Some(code) = code {
            out.push_str(&format!(", error=\"{code}\""));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IssuerEntry;

    fn config(resource: &str) -> AuthConfig {
        let text = format!(
            "resource = \"{resource}\"\nissuers = [\"https://as.example\"]\nrequired_scopes = [\"mcp\"]\n"
        );
        let mut c: AuthConfig = toml::from_str(&text).unwrap();
        c.issuers = vec![IssuerEntry::Url("https://as.example".into())];
        c
    }

    #[test]
    fn path_inserted_and_root() {
        let m = ResourceMetadata::new(
            &config("https://gw.example/t/acme/mcp"),
            &PolicyConfig::default(),
            "/mcp",
            &BTreeMap::new(),
        );
        assert_eq!(
            m.metadata_url(),
            "https://gw.example/.well-known/oauth-protected-resource/t/acme/mcp"
        );
        assert_eq!(
            m.paths,
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource/t/acme/mcp"
            ]
        );
        assert_eq!(m.document["resource"], "https://gw.example/t/acme/mcp");
        assert_eq!(
            m.root_document.as_ref().unwrap()["resource"],
            "https://gw.example"
        );
        assert_eq!(m.document["scopes_supported"], json!(["mcp"]));
        assert_eq!(m.document["bearer_methods_supported"], json!(["header"]));
    }

    #[test]
    fn challenges() {
        let m = ResourceMetadata::new(
            &config("https://gw.example/mcp"),
            &PolicyConfig::default(),
            "/mcp",
            &BTreeMap::new(),
        );
        let url = "https://gw.example/.well-known/oauth-protected-resource/mcp";
        assert_eq!(
            m.challenge(&AuthError::Missing),
            format!("Bearer resource_metadata=\"{url}\", scope=\"mcp\"")
        );
        assert_eq!(
            m.challenge(&AuthError::invalid("expired")),
            format!("Bearer resource_metadata=\"{url}\", scope=\"mcp\", error=\"invalid_token\"")
        );
        assert!(
            m.challenge(&AuthError::InsufficientScope(vec!["a".into(), "b".into()]))
                .ends_with("scope=\"a b\", error=\"insufficient_scope\"")
        );
    }

    #[test]
    fn endpoints_get_their_own_documents_and_challenges() {
        let endpoints: BTreeMap<String, EndpointConfig> = toml::from_str(
            r#"
            [eng]
            path = "/mcp/eng"
            scopes = ["eng"]
            [ops]
            path = "/ops/"
            resource = "https://ops.example/tools/ops"
            "#,
        )
        .unwrap();
        let m = ResourceMetadata::new(
            &config("https://gw.example/mcp"),
            &PolicyConfig::default(),
            "/mcp",
            &endpoints,
        );
        let eng = &m.endpoints["eng"];
        assert_eq!(eng.path, "/.well-known/oauth-protected-resource/mcp/eng");
        assert_eq!(eng.document["resource"], "https://gw.example/mcp/eng");
        assert_eq!(eng.document["scopes_supported"], json!(["eng", "mcp"]));
        assert_eq!(
            m.challenge_at("eng", &AuthError::Missing),
            "Bearer resource_metadata=\"https://gw.example/.well-known/oauth-protected-resource/mcp/eng\", scope=\"mcp eng\""
        );
        let ops = &m.endpoints["ops"];
        assert_eq!(ops.path, "/.well-known/oauth-protected-resource/tools/ops");
        assert_eq!(ops.resource, "https://ops.example/tools/ops");
        assert_eq!(
            m.challenge_at("ops", &AuthError::Missing),
            "Bearer resource_metadata=\"https://ops.example/.well-known/oauth-protected-resource/tools/ops\", scope=\"mcp\""
        );
    }
}
