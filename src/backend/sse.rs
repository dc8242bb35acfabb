//! Legacy HTTP+SSE transport toward old backends (MCP 2024-11-05
//! basic/transports, "HTTP with SSE"; 2025-11-25 transports, backwards
//! compatibility).
//!
//! The client opens a GET event stream; the server's first event, `endpoint`,
//! names the URL to POST messages to; every answer and server message then
//! arrives on the event stream. The endpoint is resolved against the stream URL
//! per RFC 3986 §5 (so a relative `messages?sessionId=…` keeps the path prefix
//! of a server mounted below the root), its query string is kept byte-exact, and an endpoint on another origin
//! is refused: no request, and no credentials, go there.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tokio::sync::oneshot;

use super::BackendError;
use super::conn::Connection;
use super::inbound::dispatch_text;

/// How long the backend has to announce its `endpoint`.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// The legacy transport of one backend connection.
pub(crate) struct SseLink {
    backend: Arc<str>,
    client: reqwest::Client,
    extra: HeaderMap,
    endpoint: reqwest::Url,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl SseLink {
    /// Opens the event stream and waits for the `endpoint` event.
    ///
    /// Errors: [`BackendError::Unavailable`] when the stream cannot be opened, no
    /// endpoint arrives in time, or it points to another origin.
    pub(crate) async fn open(
        conn: &Arc<Connection>,
        client: reqwest::Client,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<SseLink, BackendError> {
        let backend = conn.backend.clone();
        let fail = |why: String| BackendError::closed(&backend, why);
        let stream_url = reqwest::Url::parse(url).map_err(|e| fail(format!("invalid url: {e}")))?;
        let mut extra = HeaderMap::new();
        for (k, v) in headers {
            let name =
                HeaderName::try_from(k.as_str()).map_err(|e| fail(format!("header {k}: {e}")))?;
            let mut value =
                HeaderValue::try_from(v.as_str()).map_err(|e| fail(format!("header {k}: {e}")))?;
            value.set_sensitive(true);
            extra.insert(name, value);
        }
        let mut h = extra.clone();
        h.insert(
            ACCEPT,
            HeaderValue::from_static(crate::streamable_http::EVENT_STREAM),
        );
        let resp = client
            .get(stream_url.clone())
            .headers(h)
            .send()
            .await
            .map_err(|e| fail(format!("cannot open the event stream: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(BackendError::HttpStatus {
                backend: backend.to_string(),
                status: resp.status().as_u16(),
            });
        }
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(listen(conn.downgrade(), resp, tx));
        let Ok(Ok(data)) = tokio::time::timeout(ENDPOINT_TIMEOUT, rx).await else {
            task.abort();
            return Err(fail("no endpoint event on the SSE stream".into()));
        };
        let endpoint = match resolve_endpoint(&stream_url, &data) {
            Ok(u) => u,
            Err(why) => {
                task.abort();
                return Err(fail(why));
            }
        };
        tracing::info!(backend = %backend, endpoint = %endpoint.path(), "legacy HTTP+SSE backend connected");
        Ok(SseLink {
            backend,
            client,
            extra,
            endpoint,
            listener: Mutex::new(Some(task)),
        })
    }

    fn post(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let mut h = self.extra.clone();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        self.client
            .post(self.endpoint.clone())
            .headers(h)
            .body(body)
    }

    /// POSTs a message; the answer will arrive on the event stream.
    pub(crate) async fn send(&self, bytes: Vec<u8>) -> Result<(), BackendError> {
        let resp = self
            .post(bytes)
            .send()
            .await
            .map_err(|e| BackendError::closed(&self.backend, e.without_url().to_string()))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(BackendError::HttpStatus {
                backend: self.backend.to_string(),
                status: resp.status().as_u16(),
            })
        }
    }

    /// POSTs without waiting for the outcome (failures are logged).
    pub(crate) fn send_detached(&self, bytes: Vec<u8>) {
        let req = self.post(bytes);
        let backend = self.backend.clone();
        tokio::spawn(async move {
            match req.send().await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(backend = %backend, status = r.status().as_u16(), "legacy backend refused a message")
                }
                Err(e) => {
                    tracing::warn!(backend = %backend, cause = %e.without_url(), "cannot deliver a message")
                }
            }
        });
    }

    /// Closes the event stream, which ends the legacy session.
    pub(crate) fn close(&self) {
        if let Ok(mut l) = self.listener.lock()
            && let Some(t) = l.take()
        {
            t.abort();
        }
    }
}

/// Reads the event stream: the first `endpoint` event goes to `endpoint`, every
/// `message` event is dispatched. When the stream ends, so does the connection.
async fn listen(
    conn: Weak<Connection>,
    resp: reqwest::Response,
    endpoint: oneshot::Sender<String>,
) {
    let mut endpoint = Some(endpoint);
    let mut events = std::pin::pin!(super::events::sse_events(resp.bytes_stream()));
    while let Some(ev) = events.next().await {
        let Ok(ev) = ev else { break };
        if ev.event == "endpoint" {
            if let Some(tx) = endpoint.take() {
                let _ = tx.send(ev.data.trim().to_owned());
            }
            continue;
        }
        if ev.event != "message" && !ev.event.is_empty() {
            continue;
        }
        let Some(c) = conn.upgrade() else { return };
        dispatch_text(&c, &ev.data.into(), None);
    }
    if let Some(c) = conn.upgrade() {
        c.fail_all("the legacy SSE stream ended");
    }
}

/// Resolves the `endpoint` event data against the stream URL (RFC 3986 §5) and
/// refuses another origin.
fn resolve_endpoint(stream_url: &reqwest::Url, data: &str) -> Result<reqwest::Url, String> {
    let url = stream_url
        .join(data)
        .map_err(|e| format!("invalid endpoint {data:?}: {e}"))?;
    if url.origin() != stream_url.origin() {
        return Err(format!(
            "endpoint {} is on another origin than the SSE stream; refused",
            url.origin().ascii_serialization()
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_endpoints_like_rfc3986() {
        let base = reqwest::Url::parse("http://lb.example.test/tenant1/sse").unwrap();
        let r = |d: &str| resolve_endpoint(&base, d).map(|u| u.to_string());
        assert_eq!(
            r("messages?sessionId=abc").unwrap(),
            "http://lb.example.test/tenant1/messages?sessionId=abc"
        );
        assert_eq!(
            r("/tenant1/messages?sessionId=abc").unwrap(),
            "http://lb.example.test/tenant1/messages?sessionId=abc"
        );
        assert_eq!(
            r("/messages?sessionId=abc").unwrap(),
            "http://lb.example.test/messages?sessionId=abc"
        );
        assert!(r("https://elsewhere.example.test/messages?sessionId=abc").is_err());
        assert_eq!(
            r("messages?sessionId=a%2Fb&x=1").unwrap(),
            "http://lb.example.test/tenant1/messages?sessionId=a%2Fb&x=1"
        );
    }
}
