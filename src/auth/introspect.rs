//! RFC 7662 token introspection for opaque (non-JWT) access tokens, at the
//! issuers that configure an `introspection_url`. The answer must be `active`,
//! name a trusted issuer (when it names one), an audience of ours, a subject and
//! an unexpired `exp`; answers are cached briefly by token hash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::jwks::Issuer;
use super::{AuthError, Principal, fetch, jwt};

/// Longest a positive introspection answer is reused.
const CACHE_FOR: Duration = Duration::from_secs(60);
/// Cached answers kept at most.
const CACHE_MAX: usize = 4096;

/// Introspects opaque tokens.
pub struct Introspector {
    endpoints: Vec<Arc<Issuer>>,
    client: reqwest::Client,
    audiences: Vec<String>,
    cache: Mutex<HashMap<[u8; 32], (Instant, Principal)>>,
}

impl Introspector {
    /// Uses the issuers that have an introspection endpoint.
    pub fn new(issuers: &[Arc<Issuer>], client: reqwest::Client, audiences: &[String]) -> Self {
        Introspector {
            endpoints: issuers
                .iter()
                .filter(|i| i.config.introspection_url.is_some())
                .cloned()
                .collect(),
            client,
            audiences: audiences.to_vec(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Checks an opaque token.
    ///
    /// Errors: [`AuthError::Invalid`] when no endpoint is configured, none
    /// answers `active`, or the answer is not for us.
    pub async fn check(&self, token: &str) -> Result<Principal, AuthError> {
        if self.endpoints.is_empty() {
            return Err(AuthError::invalid(
                "not a JWT and no introspection configured",
            ));
        }
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(p) = self.cached(&key) {
            return Ok(p);
        }
        let mut last = AuthError::invalid("inactive");
        for issuer in &self.endpoints {
            match self.ask(issuer, token).await {
                Ok((p, until)) => {
                    if let Ok(mut c) = self.cache.lock() {
                        if c.len() >= CACHE_MAX {
                            c.clear();
                        }
                        c.insert(key, (until, p.clone()));
                    }
                    return Ok(p);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Principal> {
        let mut c = self.cache.lock().ok()?;
        match c.get(key) {
            Some((until, p)) if Instant::now() < *until => Some(p.clone()),
            Some(_) => {
                c.remove(key);
                None
            }
            None => None,
        }
    }

    async fn ask(&self, issuer: &Issuer, token: &str) -> Result<(Principal, Instant), AuthError> {
        let cfg = &issuer.config;
        let url = cfg.introspection_url.as_deref().unwrap_or_default();
        let secret = match (&cfg.client_secret, &cfg.client_secret_file) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| AuthError::invalid(format!("client_secret_file: {e}")))?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        let req = self
            .client
            .post(url)
            .basic_auth(cfg.client_id.clone().unwrap_or_default(), secret)
            .form(&[("token", token), ("token_type_hint", "access_token")]);
        let answer: Map<String, Value> = fetch::send_json(url, req)
            .await
            .map_err(|e| AuthError::invalid(format!("introspection: {e}")))?;
        let until = accept(&answer, &cfg.issuer, &self.audiences)?;
        let p = jwt::principal(&cfg.issuer, answer, token)?;
        Ok((p, until))
    }
}

/// Checks an introspection answer (RFC 7662 §2.2); returns until when it may be cached.
fn accept(
    a: &Map<String, Value>,
    issuer: &str,
    audiences: &[String],
) -> Result<Instant, AuthError> {
    if a.get("active") != Some(&Value::Bool(true)) {
        return Err(AuthError::invalid("inactive"));
    }
    if a.get("iss")
        .and_then(Value::as_str)
        .is_some_and(|i| i != issuer)
    {
        return Err(AuthError::invalid("introspection: other issuer"));
    }
    let ours = |v: &Value| v.as_str().is_some_and(|s| audiences.iter().any(|a| a == s));
    let aud_ok = match a.get("aud") {
        Some(Value::Array(items)) => items.iter().any(ours),
        Some(v) => ours(v),
        None => false,
    };
    if !aud_ok {
        return Err(AuthError::invalid(
            "introspection: audience is not this resource",
        ));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let exp = a.get("exp").and_then(Value::as_u64);
    if exp.is_some_and(|e| e <= now) {
        return Err(AuthError::invalid("introspection: expired"));
    }
    if a.get("nbf")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > now + 30)
    {
        return Err(AuthError::invalid("introspection: not yet valid"));
    }
    let left = exp.map_or(CACHE_FOR, |e| Duration::from_secs(e - now));
    Ok(Instant::now() + left.min(CACHE_FOR))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: &Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn answers() {
        let aud = ["https://gw/mcp".to_string()];
        let ok = obj(&json!({"active": true, "aud": ["x", "https://gw/mcp"], "sub": "u"}));
        assert!(accept(&ok, "https://as", &aud).is_ok());
        let inactive = obj(&json!({"active": false}));
        assert!(accept(&inactive, "https://as", &aud).is_err());
        let other = obj(&json!({"active": true, "aud": "https://other"}));
        assert!(accept(&other, "https://as", &aud).is_err());
        let no_aud = obj(&json!({"active": true}));
        assert!(accept(&no_aud, "https://as", &aud).is_err());
        let expired = obj(&json!({"active": true, "aud": "https://gw/mcp", "exp": 1}));
        assert!(accept(&expired, "https://as", &aud).is_err());
        let wrong_iss =
            obj(&json!({"active": true, "aud": "https://gw/mcp", "iss": "https://evil"}));
        assert!(accept(&wrong_iss, "https://as", &aud).is_err());
    }
}
