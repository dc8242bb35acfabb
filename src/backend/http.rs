//! Streamable HTTP transport toward a remote backend (MCP 2025-11-25
//! basic/transports, Streamable HTTP, client side).
//!
//! Every message is its own POST with `Accept: application/json, text/event-stream`;
//! answers come as one JSON body or an SSE stream whose messages relate to the
//! request that opened it. The backend's `Mcp-Session-Id` and the revision
//! negotiated with THIS backend are sent on every later request. A 404 on a request
//! that carried the session id means the backend ended the session: the connection
//! re-initializes once and retries. Configured extra headers never replace protocol
//! headers. With an `auth` table, every request carries the gateway's own token
//! (`auth/upstream.rs`); the host's token never reaches a backend.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method as HttpMethod, StatusCode};
use tokio::sync::oneshot;

use super::client::{Body, HttpClient, Target};
use super::conn::Connection;
use super::inbound::dispatch_text;
use super::modern;
use super::{BackendError, Mirrored};
use crate::auth::upstream::UpstreamCredentials;
use crate::mcp::{Method, ProtocolVersion};
use crate::streamable_http::{
    EVENT_STREAM, LAST_EVENT_ID, MCP_METHOD as METHOD_HEADER, MCP_NAME as NAME_HEADER,
    PROTOCOL_VERSION as VERSION_HEADER, SESSION_ID as SESSION_HEADER, is_transport_header,
};

const BOTH: &str = "application/json, text/event-stream";
/// A backend's answer.
type Response = http::Response<Body>;

/// How often a POST response stream is resumed with `Last-Event-ID` (SEP-1699).
const MAX_RESUMES: usize = 5;

/// The HTTP side of one backend connection.
pub(crate) struct HttpLink {
    backend: Arc<str>,
    client: HttpClient,
    url: Arc<Target>,
    extra: HeaderMap,
    session: RwLock<Option<HeaderValue>>,
    reinit: tokio::sync::Mutex<()>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The gateway's credentials toward this backend, if configured.
    pub(crate) creds: Option<Arc<UpstreamCredentials>>,
}

impl HttpLink {
    /// Prepares the link; nothing is sent yet.
    ///
    /// Errors: [`BackendError::Unavailable`] for an unusable URL or header.
    pub(crate) fn new(
        backend: &Arc<str>,
        client: HttpClient,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<HttpLink, BackendError> {
        let url = Target::parse(url)
            .map_err(|e| BackendError::closed(backend, format!("invalid url: {e}")))?;
        let mut extra = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::try_from(k.as_str())
                .map_err(|e| BackendError::closed(backend, format!("header {k}: {e}")))?;
            if is_transport_header(name.as_str()) {
                tracing::warn!(backend = %backend, header = %k, "configured header ignored: protocol headers are set by the gateway");
                continue;
            }
            let mut value = HeaderValue::try_from(v.as_str())
                .map_err(|e| BackendError::closed(backend, format!("header {k}: {e}")))?;
            value.set_sensitive(true);
            extra.insert(name, value);
        }
        Ok(HttpLink {
            backend: backend.clone(),
            client,
            url: Arc::new(url),
            extra,
            session: RwLock::new(None),
            reinit: tokio::sync::Mutex::new(()),
            listener: Mutex::new(None),
            creds: None,
        })
    }

    /// Sets `Authorization` to the gateway's token for this backend (a token
    /// exchanged for the owning session's principal, or the gateway's own).
    async fn authorize(&self, conn: &Connection, h: &mut HeaderMap) -> Result<(), BackendError> {
        let Some(creds) = &self.creds else {
            return Ok(());
        };
        let subject = conn.subject_token();
        match creds.authorization(subject.as_deref()).await {
            Ok(v) => {
                h.insert(AUTHORIZATION, v);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(backend = %self.backend, cause = %e, "cannot obtain credentials for the backend");
                Err(BackendError::closed(
                    &self.backend,
                    "the gateway could not obtain credentials for it",
                ))
            }
        }
    }

    /// Forgets a token the backend refused, so the next request gets a new one.
    fn refused(&self, conn: &Connection) {
        if let Some(creds) = &self.creds {
            let subject = conn.subject_token();
            creds.invalidate(subject.as_deref());
        }
    }

    /// The backend's `Mcp-Session-Id`, if it gave one.
    pub(crate) fn session_id(&self) -> Option<String> {
        Some(self.session()?.to_str().ok()?.to_owned())
    }

    fn session(&self) -> Option<HeaderValue> {
        self.session.read().ok()?.clone()
    }

    fn set_session(&self, v: Option<HeaderValue>) {
        if let Ok(mut s) = self.session.write() {
            *s = v;
        }
    }

    /// Configured headers first, then the protocol headers over them.
    fn headers(&self, conn: &Connection, accept: &'static str) -> HeaderMap {
        let mut h = self.extra.clone();
        h.insert(ACCEPT, HeaderValue::from_static(accept));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = self.session() {
            h.insert(SESSION_HEADER, s);
        }
        if let Some(version) = conn.protocol_version() {
            h.insert(VERSION_HEADER, HeaderValue::from_static(version.as_str()));
        }
        h
    }

    async fn post(
        &self,
        conn: &Connection,
        body: Bytes,
        rpc: Option<(&Method, &Mirrored)>,
    ) -> Result<Response, BackendError> {
        let mut h = self.headers(conn, BOTH);
        if let (Some((method, mirrored)), Some(_)) = (rpc, conn.modern()) {
            if let Ok(v) = HeaderValue::from_str(method.as_str()) {
                h.insert(METHOD_HEADER, v);
            }
            if let Some(v) = mirrored.name.as_deref().and_then(modern::header_value) {
                h.insert(NAME_HEADER, v);
            }
            for (k, v) in &mirrored.params {
                h.insert(k.clone(), v.clone());
            }
        }
        self.authorize(conn, &mut h).await?;
        crate::telemetry::inject_current(&mut h);
        self.client
            .send(HttpMethod::POST, &self.url, h, body)
            .await
            .map_err(|e| BackendError::closed(&self.backend, e.to_string()))
    }

    /// POSTs request `id` and reads its answer (JSON or SSE), dispatching every
    /// message received on the way.
    pub(crate) async fn send_request(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        method: &Method,
        mirrored: &Mirrored,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        let body = Bytes::from(bytes);
        let (mut retried, mut adopted) = (false, false);
        loop {
            let sent_session = self.session();
            let resp = self
                .post(conn, body.clone(), Some((method, mirrored)))
                .await?;
            if conn.modern().is_some() && !resp.status().is_success() {
                return Box::pin(self.refused_modern(conn, id, resp)).await;
            }
            let status = resp.status();
            if status == StatusCode::NOT_FOUND
                && sent_session.is_some()
                && *method != Method::Initialize
                && !retried
            {
                tracing::info!(backend = %self.backend, "backend ended our session (404); re-initializing");
                let took = Box::pin(self.reinitialize(conn, sent_session)).await?;
                retried = !took || adopted;
                adopted |= took;
                continue;
            }
            if !status.is_success() {
                if status == StatusCode::UNAUTHORIZED {
                    self.refused(conn);
                }
                return Err(BackendError::HttpStatus {
                    backend: self.backend.to_string(),
                    status: status.as_u16(),
                });
            }
            if *method == Method::Initialize {
                self.set_session(resp.headers().get(SESSION_HEADER).cloned());
            }
            return self.read_answer(conn, id, resp).await;
        }
    }

    /// A stateless request answered with an error status
    /// ([`modern::refusal`]): the JSON-RPC error for our id is the answer; an
    /// established connection answered as by a legacy server forgets the cached
    /// era and closes.
    async fn refused_modern(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        resp: Response,
    ) -> Result<(), BackendError> {
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED {
            self.refused(conn);
        }
        let body = resp.into_body().bytes().await.unwrap_or_default();
        let version = conn.protocol_version().unwrap_or(ProtocolVersion::MODERN);
        let established = conn.info().is_some();
        let refusal = modern::refusal(status.as_u16(), &body, id, version);
        let answer = match refusal {
            modern::Refusal::Answer => true,
            // To a probe, -32022 is its verdict to draw (it may name another revision).
            modern::Refusal::Unsupported => !established,
            modern::Refusal::WrongEra | modern::Refusal::Status => false,
        };
        if answer {
            dispatch_text(conn, &body, Some(id));
            return Ok(());
        }
        if established && refusal != modern::Refusal::Status {
            conn.era_was_wrong("the backend answered a stateless request as a legacy server");
        }
        Err(BackendError::HttpStatus {
            backend: self.backend.to_string(),
            status: status.as_u16(),
        })
    }

    async fn read_answer(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        resp: Response,
    ) -> Result<(), BackendError> {
        if resp.status() == StatusCode::ACCEPTED {
            // No body: the answer will come on the GET stream.
            return Ok(());
        }
        if !is_event_stream(resp.headers()) {
            let body = resp
                .into_body()
                .bytes()
                .await
                .map_err(|e| BackendError::closed(&self.backend, e.to_string()))?;
            dispatch_text(conn, &body, Some(id));
            if conn.is_pending(id) {
                // Garbage, or JSON that answers something else.
                return Err(BackendError::protocol(
                    &self.backend,
                    "the response body holds no answer to the request",
                ));
            }
            return Ok(());
        }
        let mut last_id = read_events(conn, resp, Some(id)).await;
        let mut resumes = 0;
        while conn.is_pending(id) && resumes < MAX_RESUMES {
            let Some((event_id, retry)) = last_id.take() else {
                return Err(BackendError::protocol(
                    &self.backend,
                    "response stream ended without an answer",
                ));
            };
            tokio::time::sleep(retry.unwrap_or(Duration::from_millis(100))).await;
            resumes += 1;
            let mut h = self.headers(conn, EVENT_STREAM);
            h.remove(CONTENT_TYPE);
            if let Ok(v) = HeaderValue::try_from(event_id.as_str()) {
                h.insert(LAST_EVENT_ID, v);
            }
            self.authorize(conn, &mut h).await?;
            let resp = self
                .client
                .send(HttpMethod::GET, &self.url, h, Bytes::new())
                .await
                .map_err(|e| BackendError::closed(&self.backend, e.to_string()))?;
            if !resp.status().is_success() || !is_event_stream(resp.headers()) {
                return Err(BackendError::HttpStatus {
                    backend: self.backend.to_string(),
                    status: resp.status().as_u16(),
                });
            }
            last_id = read_events(conn, resp, Some(id))
                .await
                .or(Some((event_id, retry)));
        }
        Ok(())
    }

    /// Goes on after the backend ended our session (404 for `stale`): with
    /// the session another gateway process recorded in its place, if any
    /// (`Ok(true)`), else with a fresh one (`initialize`), recorded for the
    /// others unless one of them recorded its own first, which we then adopt.
    /// The request is tried once more after an adoption (that one may be gone
    /// too).
    async fn reinitialize(
        &self,
        conn: &Arc<Connection>,
        stale: Option<HeaderValue>,
    ) -> Result<bool, BackendError> {
        let _guard = self.reinit.lock().await;
        if self.session() != stale {
            return Ok(false);
        }
        if conn.adopt_recorded(stale.as_ref()).await {
            return Ok(true);
        }
        self.set_session(None);
        conn.rehandshake().await?;
        conn.record_fresh(stale.as_ref()).await;
        Ok(false)
    }

    /// POSTs a notification or response; the backend answers 202.
    pub(crate) fn send_detached(&self, conn: &Arc<Connection>, bytes: Vec<u8>) {
        let mut h = self.headers(conn, BOTH);
        let backend = self.backend.clone();
        let conn = conn.clone();
        tokio::spawn(async move {
            let Some(super::Link::Http(link)) = conn.link.get() else {
                return;
            };
            if link.authorize(&conn, &mut h).await.is_err() {
                return;
            }
            let (client, url) = (link.client.clone(), link.url.clone());
            drop(conn);
            let sent = client.send(HttpMethod::POST, &url, h, bytes.into()).await;
            match sent {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(backend = %backend, status = r.status().as_u16(), "backend refused a notification or response")
                }
                Err(e) => {
                    tracing::warn!(backend = %backend, cause = %e, "cannot deliver a notification or response")
                }
            }
        });
    }

    /// POSTs a notification and waits for the backend to accept it (used for
    /// `notifications/initialized`, which must arrive before the next request).
    pub(crate) async fn send_awaited(
        &self,
        conn: &Connection,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        let resp = self.post(conn, Bytes::from(bytes), None).await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(BackendError::HttpStatus {
                backend: self.backend.to_string(),
                status: resp.status().as_u16(),
            })
        }
    }

    /// Opens the standalone GET stream for unsolicited messages, reconnecting with
    /// backoff; stops if the backend answers 405 (it offers no such stream). The
    /// returned receiver fires once the first GET was answered (or failed).
    pub(crate) fn start_listening(&self, conn: &Arc<Connection>) -> oneshot::Receiver<()> {
        let (ready, answered) = oneshot::channel();
        let task = tokio::spawn(listen(
            conn.downgrade(),
            self.client.clone(),
            self.url.clone(),
            ready,
        ));
        if let Ok(mut l) = self.listener.lock()
            && let Some(old) = l.replace(task)
        {
            old.abort();
        }
        answered
    }

    pub(crate) fn get_headers(&self, conn: &Connection) -> HeaderMap {
        let mut h = self.headers(conn, EVENT_STREAM);
        h.remove(CONTENT_TYPE);
        h
    }

    /// Stops the GET listener; the backend session stays (another gateway
    /// process with the session's record may go on using it).
    pub(crate) fn stop_listening(&self) {
        if let Ok(mut l) = self.listener.lock()
            && let Some(task) = l.take()
        {
            task.abort();
        }
    }

    /// Stops listening and ends the backend session with `DELETE`.
    pub(crate) async fn close(&self, conn: &Connection) {
        self.stop_listening();
        if let Some(session) = self.session() {
            self.delete_session(conn, session).await;
        }
        self.set_session(None);
    }

    /// Ends backend session `session` with `DELETE` (at most 3 s; failures
    /// are only logged: the backend expires it in the end).
    pub(crate) async fn delete_session(&self, conn: &Connection, session: HeaderValue) {
        let mut h = self.headers(conn, BOTH);
        h.remove(CONTENT_TYPE);
        h.insert(SESSION_HEADER, session);
        let _ = self.authorize(conn, &mut h).await;
        let req = self
            .client
            .send(HttpMethod::DELETE, &self.url, h, Bytes::new());
        match tokio::time::timeout(Duration::from_secs(3), req).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(backend = %self.backend, cause = %e, "DELETE of backend session failed")
            }
            Err(_) => {
                tracing::debug!(backend = %self.backend, "DELETE of backend session timed out")
            }
        }
    }

    /// Goes on with backend session `session`; the one it replaces.
    pub(crate) fn swap_session(&self, session: HeaderValue) -> Option<HeaderValue> {
        self.session.write().ok()?.replace(session)
    }
}

async fn listen(
    conn: Weak<Connection>,
    client: HttpClient,
    url: Arc<Target>,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut delay = Duration::from_secs(1);
    let mut last_event: Option<String> = None;
    loop {
        let Some(c) = conn.upgrade() else { return };
        if !c.is_alive() {
            return;
        }
        let Some(super::Link::Http(link)) = c.link.get() else {
            return;
        };
        let mut h = link.get_headers(&c);
        if link.authorize(&c, &mut h).await.is_err() {
            drop(c);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
            continue;
        }
        if let Some(v) = last_event
            .as_deref()
            .and_then(|v| HeaderValue::try_from(v).ok())
        {
            h.insert(LAST_EVENT_ID, v);
        }
        let backend = c.backend.clone();
        drop(c);
        let answer = client.send(HttpMethod::GET, &url, h, Bytes::new()).await;
        if let Some(tx) = ready.take() {
            let _ = tx.send(());
        }
        match answer {
            Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
            Ok(r) if r.status().is_success() && is_event_stream(r.headers()) => {
                delay = Duration::from_secs(1);
                let Some(c) = conn.upgrade() else { return };
                if let Some((id, retry)) = read_events(&c, r, None).await {
                    last_event = Some(id);
                    if let Some(r) = retry {
                        delay = r;
                    }
                }
            }
            Ok(r) => {
                tracing::debug!(backend = %backend, status = r.status().as_u16(), "backend GET stream refused");
            }
            Err(e) => {
                tracing::debug!(backend = %backend, cause = %e, "backend GET stream failed");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Dispatches every SSE event of `resp`; returns the last event id seen and the
/// last `retry` value, for resumption.
async fn read_events(
    conn: &Arc<Connection>,
    resp: Response,
    related: Option<u64>,
) -> Option<(String, Option<Duration>)> {
    let mut events = std::pin::pin!(super::events::sse_events(resp.into_body().stream()));
    let mut last: Option<(String, Option<Duration>)> = None;
    while let Some(ev) = events.next().await {
        let Ok(ev) = ev else { break };
        if !ev.id.is_empty() {
            let retry = ev.retry.or(last.as_ref().and_then(|l| l.1));
            last = Some((ev.id.clone(), retry));
        }
        if ev.data.is_empty() || (ev.event != "message" && !ev.event.is_empty()) {
            continue;
        }
        dispatch_text(conn, &ev.data.into(), related);
        if let Some(id) = related
            && !conn.is_pending(id)
        {
            break;
        }
    }
    last
}

fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with(EVENT_STREAM))
}

/// `headers` with the lines of `file` (`Name: value`, `#` comments) merged
/// over them: secrets mounted as files, read at each connect so they can rotate.
///
/// Errors: [`BackendError::Unavailable`] when the file is unreadable or malformed.
pub(crate) fn with_headers_file(
    backend: &str,
    headers: &BTreeMap<String, String>,
    file: Option<&std::path::Path>,
) -> Result<BTreeMap<String, String>, BackendError> {
    let mut out = headers.clone();
    let Some(path) = file else { return Ok(out) };
    let text = std::fs::read_to_string(path).map_err(|e| {
        BackendError::closed(backend, format!("headers_file {}: {e}", path.display()))
    })?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            return Err(BackendError::closed(
                backend,
                format!(
                    "headers_file {} line {}: expected `Name: value`",
                    path.display(),
                    n + 1
                ),
            ));
        };
        out.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(out)
}
