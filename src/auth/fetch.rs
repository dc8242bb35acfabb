//! Outbound fetches of the auth machinery (issuer metadata, JWKS, introspection,
//! token endpoints): https only (http on loopback, for tests), no redirects,
//! a timeout and a size cap on every answer.

use std::time::Duration;

use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::config::is_fetchable_url;

/// Largest accepted answer (metadata, JWKS, token responses).
pub const MAX_BODY: usize = 256 * 1024;

/// Why a fetch failed (logged; never shown to hosts).
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The URL is not https (or loopback http).
    #[error("refusing to fetch {0}: https required (http only on loopback)")]
    Insecure(String),
    /// Transport failure or timeout.
    #[error("fetching {url} failed: {cause}")]
    Transport {
        /// The URL.
        url: String,
        /// What happened.
        cause: String,
    },
    /// A non-2xx status.
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body (token endpoints explain errors there).
        body: String,
    },
    /// Larger than [`MAX_BODY`].
    #[error("{0} answered more than {MAX_BODY} bytes")]
    TooLarge(String),
    /// Not the expected JSON.
    #[error("{url} answered unexpected JSON: {cause}")]
    Json {
        /// The URL.
        url: String,
        /// The parse error.
        cause: String,
    },
}

/// A client for the auth fetches: no redirects (a redirect could lead a
/// well-known fetch elsewhere), bounded time.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .unwrap_or_default()
}

/// Checks the URL, sends `req` and parses a JSON answer of at most [`MAX_BODY`].
pub async fn send_json<T: DeserializeOwned>(
    url: &str,
    req: reqwest::RequestBuilder,
) -> Result<T, FetchError> {
    if !is_fetchable_url(url) {
        return Err(FetchError::Insecure(url.to_owned()));
    }
    let transport = |e: reqwest::Error| FetchError::Transport {
        url: url.to_owned(),
        cause: e.without_url().to_string(),
    };
    let resp = req
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(transport)?;
    let status = resp.status();
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(transport)?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(FetchError::TooLarge(url.to_owned()));
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(FetchError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body: text,
        });
    }
    serde_json::from_slice(&body).map_err(|e| FetchError::Json {
        url: url.to_owned(),
        cause: e.to_string(),
    })
}

/// GETs JSON from `url`.
pub async fn get_json<T: DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
) -> Result<T, FetchError> {
    send_json(url, client.get(url)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_plain_http_off_loopback() {
        let c = client(Duration::from_secs(1));
        let e = get_json::<serde_json::Value>(&c, "http://as.example.com/jwks")
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Insecure(_)), "{e}");
    }
}
