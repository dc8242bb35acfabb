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

/// Who opens the standalone GET stream on a backend session that several
/// processes share (the official SDK servers refuse a second one with 409):
/// asked each time a connection would open it.
pub trait ListenGate: Send + Sync + 'static {
    /// Whether `conn` opens its GET stream now (`true`; also when nobody can
    /// tell), or stands by while another process listens (`false`: the gate
    /// calls [`Connection::listen_now`] when it is this one's turn).
    fn claim(self: Arc<Self>, conn: &Arc<Connection>) -> BoxFuture<'static, bool>;
    /// `conn` stopped listening for good (closed or released here): another
    /// process may take over. Awaited by the close.
    fn release(self: Arc<Self>) -> BoxFuture<'static, ()>;
}

/// What a per-session connection starts with when its backend session may be
/// recorded elsewhere ([`crate::backend::Slot::get_recorded`]).
pub struct Resume {
    /// The recorded backend session to go on with (`None`: initialize).
    pub recorded: Option<RecordedSession>,
    /// Where a replacement is recorded.
    pub recorder: Arc<dyn SessionRecorder>,
    /// Who may listen on it (`None`: this connection always does).
    pub gate: Option<Arc<dyn ListenGate>>,
}

impl Connection {
    /// Opens the standalone GET stream of a new legacy Streamable HTTP
    /// connection unless its gate says another process listens, and waits
    /// (at most [`super::GET_STREAM_WAIT`]) for the backend's answer.
    pub(super) async fn open_get(self: &Arc<Self>) {
        let Some(Link::Http(l)) = self.link.get() else {
            return;
        };
        if let Some(gate) = self.listen_gate.get()
            && !gate.clone().claim(self).await
        {
            return;
        }
        let answered = l.start_listening(self);
        let _ = tokio::time::timeout(super::GET_STREAM_WAIT, answered).await;
    }

    /// Opens the standalone GET stream now (a standby whose turn came);
    /// nothing for a closed connection or another transport.
    pub fn listen_now(self: &Arc<Self>) {
        if let (Some(Link::Http(l)), true) = (self.link.get(), self.is_alive()) {
            drop(l.start_listening(self));
        }
    }

    /// Tells the gate, if any, that this connection listens no more.
    pub(super) async fn release_get(&self) {
        if let Some(gate) = self.listen_gate.get() {
            gate.clone().release().await;
        }
    }

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
    /// as for a new connection (if `gate` lets it). `None` when the backend is not spoken to that
    /// way (stdio, HTTP+SSE, 2026-07-28): the caller connects as usual.
    ///
    /// Errors: an unusable URL, header or `headers_file`.
    pub(super) async fn resume(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        recorded: &RecordedSession,
        gate: Option<Arc<dyn ListenGate>>,
    ) -> Result<Option<Arc<Connection>>, BackendError> {
        let conn = self.on_recorded(owner, handler, capabilities, recorded)?;
        if let Some(c) = &conn {
            if let Some(g) = gate {
                let _ = c.listen_gate.set(g);
            }
            c.open_get().await;
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
