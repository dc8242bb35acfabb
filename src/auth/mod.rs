//! The gateway as an OAuth 2.1 protected resource (MCP 2025-11-25
//! basic/authorization; RFC 9728): bearer validation ([`jwt`], keys from
//! [`jwks`], opaque tokens through [`introspect`]), Protected Resource Metadata
//! ([`metadata`]), the authorization policy ([`policy`]) and the gateway's own
//! credentials toward backends ([`upstream`]). The HTTP plane answers for it in
//! `http/auth.rs`.

pub mod fetch;
mod handle;
pub mod introspect;
pub mod jwks;
pub mod jwt;
pub mod metadata;
pub mod policy;
pub mod upstream;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::config::{AuthConfig, EndpointConfig, PolicyConfig};
pub use handle::AuthHandle;
use jwks::Issuer;
use metadata::ResourceMetadata;

/// Why a request was not authenticated. Only the RFC 6750 code reaches the
/// host; the reason is logged at debug level.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` credentials (RFC 6750 §3.1: no error code).
    #[error("no bearer token")]
    Missing,
    /// A token was presented and is not acceptable (`invalid_token`).
    #[error("invalid token: {0}")]
    Invalid(String),
    /// A token in the URI query (MCP authorization: MUST NOT), or several
    /// methods at once (`invalid_request`, RFC 6750 §3.1).
    #[error("access token in the query string")]
    QueryToken,
    /// Valid token without the scopes every request needs (`insufficient_scope`).
    #[error("token lacks scopes {0:?}")]
    InsufficientScope(Vec<String>),
}

impl AuthError {
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        AuthError::Invalid(reason.into())
    }
}

/// Who is calling: the verified token's issuer and subject, its scopes and claims.
#[derive(Clone)]
pub struct Principal {
    /// `iss`.
    pub issuer: Arc<str>,
    /// `sub`.
    pub subject: Arc<str>,
    /// Granted scopes.
    pub scopes: BTreeSet<String>,
    /// Every verified claim (policy rules match on them).
    pub claims: Map<String, Value>,
    /// The presented token: only ever used as the RFC 8693 `subject_token`;
    /// never logged, never forwarded.
    token: Arc<str>,
}

impl Principal {
    /// A principal (tests that authenticate by other means).
    #[cfg(test)]
    pub fn new(issuer: &str, subject: &str, scopes: &[&str], token: &str) -> Self {
        Principal {
            issuer: issuer.into(),
            subject: subject.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: Map::new(),
            token: token.into(),
        }
    }

    /// The principal a token with these (already trusted) claims would be: `iss`
    /// and `sub` non-empty strings, scopes from `scope`/`scp`. For `mcpgate
    /// catalog --claims`; no token, so it can never be exchanged.
    ///
    /// Errors: which claim is missing.
    pub fn from_claims(claims: Map<String, Value>) -> Result<Principal, String> {
        let issuer = claims
            .get("iss")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("the claims need \"iss\" (a string)")?
            .to_owned();
        jwt::principal(&issuer, claims, "").map_err(|_| "the claims need \"sub\" (a string)".into())
    }

    /// Issuer + subject: what a session is bound to (MCP 2025-11-25
    /// basic/security_best_practices, session hijacking).
    pub fn id(&self) -> PrincipalId {
        PrincipalId {
            issuer: self.issuer.clone(),
            subject: self.subject.clone(),
        }
    }

    /// The presented access token, for token exchange only.
    pub fn token(&self) -> &Arc<str> {
        &self.token
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// The identity a session is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PrincipalId {
    /// `iss`.
    pub issuer: Arc<str>,
    /// `sub`.
    pub subject: Arc<str>,
}

/// Who holds a per-session backend's connections, for
/// `max_connections_per_client`: the principal, or on an open endpoint the
/// client's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// An authenticated caller.
    Principal(PrincipalId),
    /// A caller on an open endpoint, by address.
    Address(std::net::IpAddr),
}

impl ClientKey {
    /// The principal if there is one, else the address; `None` when neither is
    /// known (a session restored without its client's address): not capped.
    pub fn of(
        principal: Option<&PrincipalId>,
        client: Option<std::net::IpAddr>,
    ) -> Option<ClientKey> {
        match (principal, client) {
            (Some(p), _) => Some(ClientKey::Principal(p.clone())),
            (None, Some(ip)) => Some(ClientKey::Address(ip)),
            (None, None) => None,
        }
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::Principal(p) => write!(f, "principal {} {}", p.issuer, p.subject),
            ClientKey::Address(ip) => write!(f, "address {ip}"),
        }
    }
}

/// Validates bearer tokens for the MCP endpoint.
pub struct Authenticator {
    issuers: Vec<Arc<Issuer>>,
    rules: jwt::Rules,
    required_scopes: Vec<String>,
    /// The audiences accepted at every endpoint (`auth.resource`, its origin).
    shared_audiences: Vec<String>,
    introspection: introspect::Introspector,
    /// The metadata document and the URLs it is served at.
    pub metadata: ResourceMetadata,
}

impl Authenticator {
    /// Builds the authenticator when `[auth]` configures issuers (`None` for an
    /// open endpoint). `endpoint_path` is `server.path`; `endpoints` the virtual
    /// endpoints (their resources are accepted audiences too, each only at its own
    /// endpoint: [`Authenticator::authenticate_at`]).
    pub fn new(
        config: &AuthConfig,
        policy: &PolicyConfig,
        endpoint_path: &str,
        endpoints: &std::collections::BTreeMap<String, EndpointConfig>,
    ) -> Option<Arc<Authenticator>> {
        if !config.enabled() {
            return None;
        }
        let resource = config.resource.clone().unwrap_or_default();
        let client = fetch::client(config.fetch_timeout);
        let issuers: Vec<Arc<Issuer>> = config
            .issuers
            .iter()
            .map(|e| {
                Arc::new(Issuer::new(
                    e.config(),
                    client.clone(),
                    config.jwks_refresh_interval,
                    config.jwks_min_refresh_interval,
                ))
            })
            .collect();
        let metadata = ResourceMetadata::new(config, policy, endpoint_path, endpoints);
        let mut audiences = vec![resource];
        if let Some(root) = metadata.root_resource() {
            audiences.push(root.to_owned());
        }
        let shared = audiences.clone();
        for m in metadata.endpoints.values() {
            if !audiences.contains(&m.resource) {
                audiences.push(m.resource.clone());
            }
        }
        let algorithms = config
            .algorithms
            .iter()
            .filter_map(|a| a.parse::<Algorithm>().ok())
            .filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
            .collect();
        Some(Arc::new(Authenticator {
            introspection: introspect::Introspector::new(&issuers, client, &audiences),
            rules: jwt::Rules {
                audiences,
                algorithms,
                leeway: config.leeway.as_secs(),
            },
            issuers,
            required_scopes: config.required_scopes.clone(),
            shared_audiences: shared,
            metadata,
        }))
    }

    /// Loads every issuer's keys in the background and keeps them fresh.
    pub fn start(&self, stop: &CancellationToken) {
        for i in &self.issuers {
            if i.config.jwks_url.is_some() || i.config.introspection_url.is_none() {
                tokio::spawn(i.clone().keep_fresh(stop.clone()));
            }
        }
    }

    /// Authenticates one request from its `Authorization` header value and its
    /// URI query.
    ///
    /// Errors: see [`AuthError`]; each maps to one RFC 6750 answer.
    pub async fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Principal, AuthError> {
        self.authenticate_at("", authorization, query).await
    }

    /// [`Authenticator::authenticate`] at virtual endpoint `endpoint`
    /// (`[endpoints.NAME]`; `""`: `server.path`): the token must also hold the
    /// endpoint's scopes (else [`AuthError::InsufficientScope`] naming all it
    /// needs) and, when it names an audience, name this endpoint's resource or
    /// `auth.resource` (RFC 8707: a token issued for another endpoint is
    /// [`AuthError::Invalid`] here).
    pub async fn authenticate_at(
        &self,
        endpoint: &str,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Principal, AuthError> {
        let principal = self.verify(authorization, query).await?;
        let here = self.metadata.endpoints.get(endpoint);
        let required = here.map_or(&self.required_scopes, |m| &m.required_scopes);
        if required.iter().any(|s| !principal.scopes.contains(s)) {
            return Err(AuthError::InsufficientScope(required.clone()));
        }
        if let Some(m) = here
            && let Some(aud) = principal.claims.get("aud")
        {
            let names = |want: &str| match aud {
                Value::String(a) => a == want,
                Value::Array(all) => all.iter().any(|a| a.as_str() == Some(want)),
                _ => false,
            };
            if !names(&m.resource) && !self.shared_audiences.iter().any(|a| names(a)) {
                return Err(AuthError::invalid("audience is another endpoint's"));
            }
        }
        Ok(principal)
    }

    async fn verify(
        &self,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Principal, AuthError> {
        if query.is_some_and(has_query_token) {
            return Err(AuthError::QueryToken);
        }
        let token = bearer(authorization)?;
        if token.len() > jwt::MAX_TOKEN_LEN {
            return Err(AuthError::invalid("token too large"));
        }
        let principal = if jwt::looks_like_jwt(token) {
            jwt::verify(token, &self.issuers, &self.rules).await?
        } else {
            self.introspection.check(token).await?
        };
        Ok(principal)
    }
}

/// The token of an `Authorization: Bearer` header (RFC 6750 §2.1; the scheme
/// is case-insensitive).
pub(crate) fn bearer(value: Option<&[u8]>) -> Result<&str, AuthError> {
    let Some(raw) = value else {
        return Err(AuthError::Missing);
    };
    let text = std::str::from_utf8(raw).map_err(|_| AuthError::invalid("not UTF-8"))?;
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Missing);
    }
    let token = rest.trim();
    if token.is_empty() || token.contains(' ') {
        return Err(AuthError::invalid("empty or malformed bearer"));
    }
    Ok(token)
}

fn has_query_token(query: &str) -> bool {
    url::form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "access_token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_forms() {
        assert!(matches!(bearer(None), Err(AuthError::Missing)));
        assert!(matches!(
            bearer(Some(b"Basic dTpw")),
            Err(AuthError::Missing)
        ));
        assert!(matches!(
            bearer(Some(b"Bearer")),
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            bearer(Some(b"Bearer   ")),
            Err(AuthError::Invalid(_))
        ));
        assert_eq!(bearer(Some(b"bearer abc")).unwrap(), "abc");
        assert_eq!(bearer(Some(b"Bearer  abc ")).unwrap(), "abc");
    }

    #[test]
    fn query_tokens() {
        assert!(has_query_token("a=1&access_token=x"));
        assert!(!has_query_token("a=1"));
    }
}
