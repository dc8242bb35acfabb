//! A per-session Streamable HTTP connection whose backend session lives
//! longer than the connection: recorded somewhere the client face does not
//! know (the gateway's shared session store), resumed by a connection of
//! another gateway process without a handshake, and replaced once for all of
//! them when the backend forgets it (MCP 2025-11-25 basic/transports, session
//! management: a 404 for a session id means "initialize again").

use std::sync::Arc;

use ::http::HeaderValue;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::conn::{Connection, InitInfo};
use super::{BackendError, BackendSpec, Link, Owner, UpstreamHandler, client, http};
use crate::config::{BackendEra, Transport};
use crate::mcp::ProtocolVersion;

/// A backend session as recorded: what a connection needs to go on with it
/// without `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSession {
    /// The backend's `Mcp-Session-Id`.
    pub id: String,
    /// The revision negotiated with the backend.
    pub version: ProtocolVersion,
    /// The backend's server capabilities from its `initialize` result.
    pub capabilities: Value,
}

/// Where a connection's backend session is recorded (the supervisor's shared
/// store). Both calls may fail quietly: the connection then goes on with
/// what it has.
pub trait SessionRecorder: Send + Sync + 'static {
    /// The backend answered 404 for `stale`: the backend session recorded
    /// now when it is another one (another process replaced it first), for
    /// the connection to adopt instead of initializing.
    fn recorded(&self, stale: &str) -> BoxFuture<'_, Option<RecordedSession>>;
    /// The connection opened `new` in place of `stale` (`None`: none was
    /// recorded): record it unless another process recorded a replacement
    /// first, which is returned for the connection to adopt.
    fn record(
        &self,
        stale: Option<String>,
        new: RecordedSession,
    ) -> BoxFuture<'_, Option<RecordedSession>>;
}

/// What a per-session connection starts with when its backend session may be
/// recorded elsewhere ([`crate::backend::Slot::get_recorded`]).
pub struct Resume {
    /// The recorded backend session to go on with (`None`: initialize).
    pub recorded: Option<RecordedSession>,
    /// Where a replacement is recorded.
    pub recorder: Arc<dyn SessionRecorder>,
}

impl Connection {
    /// The recorder of this connection's backend session, if any.
    pub(super) fn recorder(&self) -> Option<&Arc<dyn SessionRecorder>> {
        self.recorder.get()
    }

    /// This connection's backend session as it would be recorded (`None`: no
    /// Streamable HTTP session, or no handshake yet).
    pub fn recorded_session(&self) -> Option<RecordedSession> {
        let (id, version) = self.upstream_session()?;
        let capabilities = self.info()?.capabilities.clone();
        Some(RecordedSession {
            id,
            version,
            capabilities,
        })
    }

    /// After a 404 for backend session `stale`: goes on with the one another
    /// process recorded in its place, if any; whether it did.
    pub(super) async fn adopt_recorded(self: &Arc<Self>, stale: Option<&HeaderValue>) -> bool {
        let stale = stale.and_then(|v| v.to_str().ok());
        let (Some(r), Some(stale)) = (self.recorder(), stale) else {
            return false;
        };
        match r.recorded(stale).await {
            Some(other) => self.adopt(&other).await,
            None => false,
        }
    }

    /// After a new handshake in place of backend session `stale`: records the
    /// new one, or goes on with another process's recorded first.
    pub(super) async fn record_fresh(self: &Arc<Self>, stale: Option<&HeaderValue>) {
        let stale = stale.and_then(|v| v.to_str().ok()).map(str::to_owned);
        if let (Some(r), Some(new)) = (self.recorder(), self.recorded_session())
            && let Some(other) = r.record(stale, new).await
        {
            self.adopt(&other).await;
        }
    }

    /// Goes on with `other`, a backend session another process recorded in
    /// place of ours, and ends ours (`DELETE`: it was just opened and holds
    /// nothing). Refused (we keep ours) when `other` was negotiated at another
    /// revision than this connection speaks.
    pub async fn adopt(self: &Arc<Self>, other: &RecordedSession) -> bool {
        let Some(Link::Http(link)) = self.link.get() else {
            return false;
        };
        if self.info().map(|i| i.version) != Some(other.version) {
            tracing::info!(backend = %self.backend, "another replica's backend session has another revision; keeping ours");
            return false;
        }
        let Ok(value) = HeaderValue::try_from(other.id.as_str()) else {
            return false;
        };
        if let Some(ours) = link.swap_session(value) {
            link.delete_session(self, ours).await;
        }
        tracing::info!(backend = %self.backend, "went on with the backend session another replica recorded");
        true
    }
}

impl BackendSpec {
    /// A per-session connection on a recorded Streamable HTTP backend session:
    /// no `initialize` (its answer is the record's); the GET stream is opened
    /// as for a new connection. `None` when the backend is not spoken to that
    /// way (stdio, HTTP+SSE, 2026-07-28): the caller connects as usual.
    ///
    /// Errors: an unusable URL, header or `headers_file`.
    pub(super) async fn resume(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        recorded: &RecordedSession,
    ) -> Result<Option<Arc<Connection>>, BackendError> {
        let conn = self.on_recorded(owner, handler, capabilities, recorded)?;
        if let Some(c) = &conn
            && let Some(Link::Http(l)) = c.link.get()
        {
            let answered = l.start_listening(c);
            let _ = tokio::time::timeout(super::GET_STREAM_WAIT, answered).await;
        }
        Ok(conn)
    }

    /// Ends recorded backend session `recorded` with `DELETE`, for a host
    /// session that ends in a process holding no connection to it (`owner`
    /// and `handler` as for the session's own connection: credentials may be
    /// exchanged for its principal). Failures are only logged.
    pub async fn end_recorded(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        recorded: &RecordedSession,
    ) {
        match self.on_recorded(owner, handler, Value::Null, recorded) {
            Ok(Some(conn)) => conn.close().await,
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(backend = %self.name, cause = %e, "cannot end a recorded backend session")
            }
        }
    }

    /// A connection object on `recorded`, nothing sent; see [`BackendSpec::resume`].
    fn on_recorded(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        recorded: &RecordedSession,
    ) -> Result<Option<Arc<Connection>>, BackendError> {
        let legacy_http = self.config.era != BackendEra::Modern
            && !self
                .legacy_detected
                .load(std::sync::atomic::Ordering::Relaxed);
        let (Transport::Http { url, headers }, true) = (&self.config.transport, legacy_http) else {
            return Ok(None);
        };
        let Ok(session) = HeaderValue::try_from(recorded.id.as_str()) else {
            return Ok(None);
        };
        let conn = Arc::new(Connection::new(
            self.name.clone(),
            owner,
            handler,
            capabilities,
            self.timeout.clone(),
            None,
        ));
        let headers =
            http::with_headers_file(&self.name, headers, self.config.headers_file.as_deref())?;
        let reqwest = || self.http.clone().unwrap_or_default();
        let client =
            (self.client.clone()).unwrap_or_else(|| client::HttpClient::Proxied(reqwest()));
        let mut link = http::HttpLink::new(&self.name, client, url, &headers)?;
        link.creds = self.creds.clone();
        link.swap_session(session);
        let _ = conn.info.set(InitInfo {
            version: recorded.version,
            capabilities: recorded.capabilities.clone(),
            instructions: None,
        });
        let _ = conn.link.set(Link::Http(Box::new(link)));
        Ok(Some(conn))
    }
}
