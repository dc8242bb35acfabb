//! The gateway's own credentials toward an HTTP backend (MCP
//! 2025-11-25 security best practices: "token passthrough" is forbidden, so a
//! backend never sees the host's token).
//!
//! * OAuth 2.0 client credentials (RFC 6749 §4.4, via the `oauth2` crate): one
//!   token for the gateway, cached, refreshed shortly before it expires, one
//!   refresh at a time.
//! * RFC 8693 token exchange: for a per-session connection, the host's token is
//!   the `subject_token` of an exchange at the backend's authorization server;
//!   the issued token (for the backend's audience) is cached per subject token.
//!   The catalogue connection, which acts for no one, uses client credentials.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use oauth2::basic::BasicClient;
use oauth2::{ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
use reqwest::header::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::fetch::{self, FetchError, MAX_BODY};
use crate::config::{TokenEndpointConfig, UpstreamAuthConfig, is_fetchable_url};

/// RFC 8693 §2.1 grant type.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 §3 token type of an access token.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Exchanged tokens kept at most (per backend).
const EXCHANGED_MAX: usize = 4096;

/// Why the gateway could not obtain a token for a backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamAuthError {
    /// The client secret file could not be read.
    #[error("cannot read client_secret_file: {0}")]
    Secret(String),
    /// The token endpoint refused or failed.
    #[error("token request failed: {0}")]
    Token(String),
}

#[derive(Clone)]
struct Token {
    header: HeaderValue,
    refresh_at: Option<Instant>,
}

impl Token {
    fn new(access_token: &str, expires_in: Option<Duration>) -> Result<Token, UpstreamAuthError> {
        let mut header = HeaderValue::try_from(format!("Bearer {access_token}"))
            .map_err(|_| UpstreamAuthError::Token("access token is not a header value".into()))?;
        header.set_sensitive(true);
        // Refresh a fifth of the lifetime (at most a minute) before expiry.
        let refresh_at =
            expires_in.map(|d| Instant::now() + d - (d / 5).min(Duration::from_secs(60)));
        Ok(Token { header, refresh_at })
    }

    fn fresh(&self) -> bool {
        self.refresh_at.is_none_or(|t| Instant::now() < t)
    }
}

/// Credentials of one backend.
pub struct UpstreamCredentials {
    backend: Arc<str>,
    exchange: bool,
    endpoint: TokenEndpointConfig,
    http: reqwest::Client,
    own: RwLock<Option<Token>>,
    refreshing: tokio::sync::Mutex<()>,
    exchanged: Mutex<HashMap<[u8; 32], Token>>,
    exchanging: tokio::sync::Mutex<()>,
}

#[derive(Deserialize)]
struct ExchangeAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

impl UpstreamCredentials {
    /// Credentials for `backend` as configured.
    pub fn new(backend: &str, config: &UpstreamAuthConfig) -> Arc<UpstreamCredentials> {
        Arc::new(UpstreamCredentials {
            backend: backend.into(),
            exchange: matches!(config, UpstreamAuthConfig::TokenExchange(_)),
            endpoint: config.endpoint().clone(),
            http: fetch::client(Duration::from_secs(10)),
            own: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            exchanged: Mutex::new(HashMap::new()),
            exchanging: tokio::sync::Mutex::new(()),
        })
    }

    /// The `Authorization` value for a request to the backend. `subject` is the
    /// host's token when the connection belongs to one session (used only for
    /// token exchange).
    ///
    /// Errors: [`UpstreamAuthError`] when no token can be obtained.
    pub async fn authorization(
        &self,
        subject: Option<&str>,
    ) -> Result<HeaderValue, UpstreamAuthError> {
        match subject {
            Some(s) if self.exchange => self.exchanged(s).await,
            _ => self.own().await,
        }
    }

    /// Forgets the cached token after the backend refused it (HTTP 401), so the
    /// next request obtains a new one.
    pub fn invalidate(&self, subject: Option<&str>) {
        match subject {
            Some(s) if self.exchange => {
                if let Ok(mut m) = self.exchanged.lock() {
                    m.remove(&hash(s));
                }
            }
            _ => {
                if let Ok(mut t) = self.own.write() {
                    *t = None;
                }
            }
        }
    }

    fn current(&self) -> Option<Token> {
        self.own.read().ok()?.clone().filter(Token::fresh)
    }

    async fn own(&self) -> Result<HeaderValue, UpstreamAuthError> {
        if let Some(t) = self.current() {
            return Ok(t.header);
        }
        let _one = self.refreshing.lock().await;
        if let Some(t) = self.current() {
            return Ok(t.header);
        }
        let token = self.client_credentials().await?;
        tracing::debug!(backend = %self.backend, "obtained a client-credentials token");
        if let Ok(mut t) = self.own.write() {
            *t = Some(token.clone());
        }
        Ok(token.header)
    }

    fn secret(&self) -> Result<Option<String>, UpstreamAuthError> {
        match (
            &self.endpoint.client_secret,
            &self.endpoint.client_secret_file,
        ) {
            (Some(s), _) => Ok(Some(s.clone())),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map(|s| Some(s.trim().to_owned()))
                .map_err(|e| UpstreamAuthError::Secret(format!("{}: {e}", path.display()))),
            (None, None) => Ok(None),
        }
    }

    async fn client_credentials(&self) -> Result<Token, UpstreamAuthError> {
        let e = &self.endpoint;
        let url = TokenUrl::new(e.token_url.clone())
            .map_err(|err| UpstreamAuthError::Token(format!("token_url: {err}")))?;
        let mut client = BasicClient::new(ClientId::new(e.client_id.clone())).set_token_uri(url);
        if let Some(secret) = self.secret()? {
            client = client.set_client_secret(ClientSecret::new(secret));
        }
        let mut req = client
            .exchange_client_credentials()
            .add_scopes(e.scopes.iter().cloned().map(Scope::new));
        if let Some(r) = &e.resource {
            req = req.add_extra_param("resource", r.clone());
        }
        if let Some(a) = &e.audience {
            req = req.add_extra_param("audience", a.clone());
        }
        let answer = req
            .request_async(&CappedClient(&self.http))
            .await
            .map_err(|err| UpstreamAuthError::Token(describe(&err)))?;
        Token::new(answer.access_token().secret(), answer.expires_in())
    }

    async fn exchanged(&self, subject: &str) -> Result<HeaderValue, UpstreamAuthError> {
        let key = hash(subject);
        let cached = || {
            self.exchanged
                .lock()
                .ok()?
                .get(&key)
                .filter(|t| t.fresh())
                .map(|t| t.header.clone())
        };
        if let Some(h) = cached() {
            return Ok(h);
        }
        let _one = self.exchanging.lock().await;
        if let Some(h) = cached() {
            return Ok(h);
        }
        let e = &self.endpoint;
        let scope = e.scopes.join(" ");
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        if let Some(r) = &e.resource {
            form.push(("resource", r));
        }
        if let Some(a) = &e.audience {
            form.push(("audience", a));
        }
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let req = self
            .http
            .post(&e.token_url)
            .basic_auth(&e.client_id, self.secret()?)
            .form(&form);
        let answer: ExchangeAnswer = fetch::send_json(&e.token_url, req)
            .await
            .map_err(|err| UpstreamAuthError::Token(err.to_string()))?;
        let token = Token::new(
            &answer.access_token,
            answer.expires_in.map(Duration::from_secs),
        )?;
        tracing::debug!(backend = %self.backend, "exchanged the host's token for a backend token");
        if let Ok(mut m) = self.exchanged.lock() {
            if m.len() >= EXCHANGED_MAX {
                m.retain(|_, t| t.fresh());
                if m.len() >= EXCHANGED_MAX {
                    m.clear();
                }
            }
            m.insert(key, token.clone());
        }
        Ok(token.header)
    }
}

fn hash(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

fn describe(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// The `oauth2` crate's HTTP hook: https only (loopback http), no redirects,
/// bounded time and body.
struct CappedClient<'a>(&'a reqwest::Client);

impl<'c> oauth2::AsyncHttpClient<'c> for CappedClient<'_> {
    type Error = FetchError;
    type Future =
        Pin<Box<dyn Future<Output = Result<oauth2::HttpResponse, FetchError>> + Send + 'c>>;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(send_capped(self.0, request))
    }
}

async fn send_capped(
    client: &reqwest::Client,
    req: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, FetchError> {
    let url = req.uri().to_string();
    if !is_fetchable_url(&url) {
        return Err(FetchError::Insecure(url));
    }
    let transport = |e: reqwest::Error| FetchError::Transport {
        url: url.clone(),
        cause: e.without_url().to_string(),
    };
    let req = reqwest::Request::try_from(req).map_err(transport)?;
    let resp = client.execute(req).await.map_err(transport)?;
    let mut builder = http_response_builder(resp.status().as_u16());
    for (k, v) in resp.headers() {
        builder = builder.header(k.as_str(), v.as_bytes());
    }
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(transport)?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(FetchError::TooLarge(url));
        }
        body.extend_from_slice(&chunk);
    }
    builder.body(body).map_err(|e| FetchError::Json {
        url: url.clone(),
        cause: e.to_string(),
    })
}

fn http_response_builder(status: u16) -> axum::http::response::Builder {
    axum::http::Response::builder().status(status)
}
