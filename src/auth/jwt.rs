//! Access-token verification (MCP 2025-11-25 basic/authorization "Token
//! Handling"; RFC 9068 JWT profile; RFC 8725 JWT best practices): size cap,
//! algorithm allow-list (asymmetric only, never `none`), key by `kid` from the
//! issuer's JWKS, `iss`, `aud` (string or array) equal to our resource
//! (RFC 8707), `exp` / `nbf` with leeway, and a `sub`.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::Issuer;
use super::{AuthError, Principal};

/// Longest accepted token (bytes). Far above real access tokens; a bigger one
/// is refused before any parsing.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// What verification needs besides the keys.
pub struct Rules {
    /// Accepted audiences (the canonical resource, maybe the origin).
    pub audiences: Vec<String>,
    /// Accepted algorithms.
    pub algorithms: Vec<Algorithm>,
    /// Leeway in seconds.
    pub leeway: u64,
}

/// Whether `token` has the JWS compact shape (three base64url segments).
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The unverified `iss` of a JWT, to pick the issuer whose keys must verify it.
pub(crate) fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("iss")?.as_str().map(str::to_owned)
}

/// Verifies a JWT access token from one of `issuers`.
///
/// Errors: [`AuthError::Invalid`] for every failure (the reason is for logs).
pub async fn verify(
    token: &str,
    issuers: &[Arc<Issuer>],
    rules: &Rules,
) -> Result<Principal, AuthError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| AuthError::invalid(format!("bad header: {e}")))?;
    if !rules.algorithms.contains(&header.alg) {
        return Err(AuthError::invalid(format!(
            "algorithm {:?} not allowed",
            header.alg
        )));
    }
    let iss = unverified_issuer(token).ok_or_else(|| AuthError::invalid("no iss"))?;
    let issuer = issuers
        .iter()
        .find(|i| i.config.issuer == iss)
        .ok_or_else(|| AuthError::invalid("untrusted issuer"))?;
    let kid = header.kid.as_deref();
    let mut candidates = issuer.keys().candidates(kid, header.alg);
    if candidates.is_empty() {
        // Unknown kid (or no keys yet): the issuer may have rotated its keys. Look
        // again even when this caller did not fetch: keys may have arrived meanwhile.
        issuer.refresh_rate_limited().await;
        candidates = issuer.keys().candidates(kid, header.alg);
    }
    if candidates.is_empty() {
        return Err(AuthError::invalid("no key for kid"));
    }
    let mut v = Validation::new(header.alg);
    v.algorithms = vec![header.alg];
    v.set_issuer(&[&issuer.config.issuer]);
    v.set_audience(&rules.audiences);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.leeway = rules.leeway;
    v.validate_nbf = true;
    let mut last = AuthError::invalid("no key");
    for key in candidates {
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &v) {
            Ok(data) => return principal(&issuer.config.issuer, data.claims, token),
            Err(e) => last = AuthError::invalid(format!("rejected: {e}")),
        }
    }
    Err(last)
}

/// Builds the principal from verified claims.
pub(super) fn principal(
    issuer: &str,
    claims: Map<String, Value>,
    token: &str,
) -> Result<Principal, AuthError> {
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| AuthError::invalid("no sub"))?
        .to_owned();
    Ok(Principal {
        issuer: issuer.into(),
        subject: subject.into(),
        scopes: scopes(&claims),
        claims,
        token: token.into(),
    })
}

/// Scopes from `scope` (space-separated, RFC 9068 §2.2.3 / RFC 8693 §4.2) and
/// `scp` (string or array, as some providers issue).
pub fn scopes(claims: &Map<String, Value>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for key in ["scope", "scp"] {
        match claims.get(key) {
            Some(Value::String(s)) => out.extend(s.split_whitespace().map(str::to_owned)),
            Some(Value::Array(items)) => {
                out.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("eyJh.eyJz.sig"));
        assert!(looks_like_jwt("eyJh.eyJz."));
        assert!(!looks_like_jwt("opaque-token"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a b.c.d"));
    }

    #[test]
    fn scope_claims() {
        let c = json!({"scope": "a b", "scp": ["c", "a"]});
        let s = scopes(c.as_object().unwrap());
        assert_eq!(s.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    }
}
