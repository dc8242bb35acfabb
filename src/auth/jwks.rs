//! One trusted issuer's signing keys: located through its metadata (RFC 8414,
//! else OpenID Connect discovery) unless configured, fetched, cached, re-fetched
//! on a schedule and on an unknown `kid` (rate-limited). A failed fetch keeps
//! the keys already held, so an unreachable JWKS endpoint does not lock users out.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fetch::{self, FetchError};
use crate::config::IssuerConfig;

/// One verification key.
pub struct Key {
    /// `kid`, if the JWK has one.
    pub kid: Option<String>,
    /// `alg`, if the JWK pins one.
    pub alg: Option<Algorithm>,
    /// The key.
    pub decoding: DecodingKey,
}

/// The keys held at one time.
#[derive(Default)]
pub struct Keys {
    keys: Vec<Arc<Key>>,
    by_kid: HashMap<String, Arc<Key>>,
}

impl Keys {
    /// Parses a JWKS document; keys that are symmetric (`oct`), meant for
    /// encryption, or not understood are skipped.
    pub fn from_jwks(doc: &Value) -> Keys {
        let mut out = Keys::default();
        let items = doc.get("keys").and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            let Ok(jwk) = serde_json::from_value::<Jwk>(item.clone()) else {
                continue;
            };
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
                || matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
            {
                continue;
            }
            let alg = match jwk.common.key_algorithm {
                None => None,
                Some(a) => match key_alg(a) {
                    Some(a) => Some(a),
                    None => continue,
                },
            };
            let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            let key = Arc::new(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                decoding,
            });
            if let Some(kid) = &key.kid {
                out.by_kid.insert(kid.clone(), key.clone());
            }
            out.keys.push(key);
        }
        out
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keys that may verify a token with this `kid` and `alg`: the one with the
    /// `kid`, or without a `kid` every key of the algorithm's family.
    pub fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Arc<Key>> {
        let fits =
            |k: &Arc<Key>| k.decoding.family() == alg.family() && k.alg.is_none_or(|a| a == alg);
        match kid {
            Some(kid) => self
                .by_kid
                .get(kid)
                .filter(|k| fits(k))
                .cloned()
                .into_iter()
                .collect(),
            None => self.keys.iter().filter(|k| fits(k)).cloned().collect(),
        }
    }
}

fn key_alg(a: KeyAlgorithm) -> Option<Algorithm> {
    Some(match a {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

/// Authorization server metadata fields the gateway reads (RFC 8414 §2).
#[derive(Debug, Deserialize)]
struct ServerMetadata {
    issuer: String,
    jwks_uri: Option<String>,
}

/// A trusted issuer and its key cache.
pub struct Issuer {
    /// The issuer identifier (`iss`), exactly as configured.
    pub config: IssuerConfig,
    client: reqwest::Client,
    keys: RwLock<Arc<Keys>>,
    jwks_url: RwLock<Option<String>>,
    /// Serializes fetches; holds when the last one was attempted.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    min_refresh: Duration,
    refresh: Duration,
}

impl Issuer {
    /// An issuer with no keys yet.
    pub fn new(
        config: IssuerConfig,
        client: reqwest::Client,
        refresh: Duration,
        min_refresh: Duration,
    ) -> Issuer {
        Issuer {
            jwks_url: RwLock::new(config.jwks_url.clone()),
            config,
            client,
            keys: RwLock::new(Arc::new(Keys::default())),
            fetching: tokio::sync::Mutex::new(None),
            min_refresh,
            refresh,
        }
    }

    /// The keys held now.
    pub fn keys(&self) -> Arc<Keys> {
        self.keys
            .read()
            .map(|k| k.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Re-fetches the JWKS unless a fetch happened less than the minimum
    /// interval ago (an unknown `kid` must not let callers hammer the issuer).
    /// Returns whether new keys were installed.
    pub async fn refresh_rate_limited(&self) -> bool {
        let before = self.keys();
        let mut last = self.fetching.lock().await;
        if !Arc::ptr_eq(&before, &self.keys()) {
            // Another fetch installed keys while this caller waited.
            return true;
        }
        if last.is_some_and(|t| t.elapsed() < self.min_refresh) {
            return false;
        }
        *last = Some(Instant::now());
        self.fetch_and_install().await
    }

    async fn fetch_and_install(&self) -> bool {
        match self.fetch().await {
            Ok(keys) if !keys.is_empty() => {
                tracing::debug!(issuer = %self.config.issuer, keys = keys.len(), "JWKS loaded");
                if let Ok(mut k) = self.keys.write() {
                    *k = Arc::new(keys);
                }
                true
            }
            Ok(_) => {
                tracing::warn!(issuer = %self.config.issuer, "JWKS has no usable signing key; keeping the keys held");
                false
            }
            Err(e) => {
                tracing::warn!(issuer = %self.config.issuer, cause = %e, "cannot fetch JWKS; keeping the keys held");
                false
            }
        }
    }

    async fn fetch(&self) -> Result<Keys, FetchError> {
        let url = match self.jwks_url.read().ok().and_then(|u| u.clone()) {
            Some(u) => u,
            None => {
                let u = self.discover().await?;
                if let Ok(mut w) = self.jwks_url.write() {
                    *w = Some(u.clone());
                }
                u
            }
        };
        let doc: Value = fetch::get_json(&self.client, &url).await?;
        Ok(Keys::from_jwks(&doc))
    }

    /// Finds `jwks_uri` in the issuer's metadata: RFC 8414 (path-inserted
    /// well-known URL) first, then OpenID Connect discovery (path-appended). The
    /// metadata must name this issuer exactly (RFC 8414 §3.3).
    async fn discover(&self) -> Result<String, FetchError> {
        let issuer = self.config.issuer.as_str();
        let mut last = None;
        for url in metadata_urls(issuer) {
            match fetch::get_json::<ServerMetadata>(&self.client, &url).await {
                Ok(m) if m.issuer == issuer => match m.jwks_uri {
                    Some(j) => return Ok(j),
                    None => {
                        last = Some(FetchError::Json {
                            url,
                            cause: "no jwks_uri".into(),
                        })
                    }
                },
                Ok(m) => {
                    last = Some(FetchError::Json {
                        url,
                        cause: format!("issuer {:?} is not {issuer:?}", m.issuer),
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| FetchError::Insecure(issuer.to_owned())))
    }

    /// Loads the keys now and then every refresh interval (sooner after a
    /// failure) until `stop`.
    pub async fn keep_fresh(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let ok = {
                let mut last = self.fetching.lock().await;
                *last = Some(Instant::now());
                self.fetch_and_install().await
            };
            let wait = if ok || !self.keys().is_empty() {
                self.refresh
            } else {
                self.min_refresh
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// RFC 8414 §3.1 (well-known suffix inserted before the issuer's path), then
/// OpenID Connect Discovery 1.0 §4 (appended).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let Ok(u) = url::Url::parse(issuer) else {
        return Vec::new();
    };
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn discovery_urls() {
        assert_eq!(
            metadata_urls("https://as.example/tenant1"),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://as.example"),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn symmetric_and_unknown_keys_are_skipped() {
        let doc = json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "XYZ", "kid": "odd"},
            {"kty": "EC", "crv": "P-256", "kid": "ec", "alg": "ES256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}
        ]});
        let keys = Keys::from_jwks(&doc);
        assert_eq!(keys.len(), 1);
        assert!(keys.candidates(Some("hmac"), Algorithm::HS256).is_empty());
        assert_eq!(keys.candidates(Some("ec"), Algorithm::ES256).len(), 1);
        assert!(keys.candidates(Some("ec"), Algorithm::RS256).is_empty());
        assert_eq!(keys.candidates(None, Algorithm::ES256).len(), 1);
    }
}
