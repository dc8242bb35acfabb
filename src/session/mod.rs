//! Host sessions (MCP 2025-11-25 basic/transports, session management): ids, the
//! per-session state the router needs, and the store behind a trait.

mod events;
mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use events::{Attached, EventLog, Frame, ResumeError};
pub use store::{MemoryStore, SessionStore, StoreFull};

use crate::auth::policy::ViewKey;
use crate::auth::{Principal, PrincipalId};
use crate::backend::{Connection, Slot};
use crate::jsonrpc::Id;
use crate::protocol::ProtocolVersion;

/// Log levels of MCP server/utilities/logging, in RFC 5424 order of severity.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A short, non-reversible form of a session id for logs (ids are bearer secrets).
pub fn log_id(id: &str) -> String {
    let d = <sha2::Sha256 as sha2::Digest>::digest(id.as_bytes());
    d[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// A message for a host: one serialized JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A notification or request related to the host request (goes before the
    /// response on its stream).
    Message(Bytes),
    /// The response that ends the host request's stream.
    Final(Bytes),
}

/// Generates a session id: 128 random bits, base64url (22 visible ASCII chars,
/// MCP 2025-11-25 transports: cryptographically secure, 0x21–0x7E only).
pub fn new_session_id() -> Arc<str> {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS RNG failing is not recoverable in a meaningful way; fall back to a
        // hash of time and address entropy rather than panicking.
        let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &bytes);
        let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
        bytes.copy_from_slice(&digest[..16]);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(bytes)
        .into()
}

/// A server→client request relayed to the host and not yet answered.
pub struct ClientRequest {
    /// The backend connection that asked.
    pub conn: Weak<Connection>,
    /// The backend's own id for the request.
    pub upstream_id: Id,
}

/// One host session.
pub struct Session {
    /// The `Mcp-Session-Id`.
    pub id: Arc<str>,
    /// A short hash of the id, for logs (the id itself is a bearer secret).
    pub log_id: String,
    /// The revision negotiated with the host.
    pub version: ProtocolVersion,
    /// The host's `initialize` capabilities.
    pub client_capabilities: Value,
    /// The host's `clientInfo`.
    pub client_info: Value,
    last_seen: Mutex<Instant>,
    /// Per-session backend connections, by backend index.
    pub upstreams: Mutex<HashMap<usize, Arc<Slot>>>,
    /// Host requests being served, by host id (for cancellation).
    pub inflight: Mutex<HashMap<Id, Arc<HostCall>>>,
    /// Server→client requests awaiting the host's answer, by the id the host saw.
    pub client_requests: Mutex<HashMap<Id, ClientRequest>>,
    next_client_id: AtomicI64,
    /// SSE streams and the events recorded for resumption.
    pub events: EventLog,
    /// Stream slots taken: SSE streams open toward the host, and requests being
    /// answered (see [`Session::reserve_stream`]).
    pub open_streams: std::sync::atomic::AtomicUsize,
    /// Tasks this session created, by exposed task id.
    pub tasks: Mutex<HashMap<String, crate::router::tasks::TaskRoute>>,
    log_level: Mutex<Option<usize>>,
    /// Cancelled when the session ends (DELETE, expiry, shutdown).
    pub closed: CancellationToken,
    /// The principal (issuer + subject) that created the session; only it may
    /// use the session (`None` when the endpoint is open).
    pub principal: Option<PrincipalId>,
    /// The authorization view the session sees (re-derived on every request).
    view_key: Mutex<ViewKey>,
    /// The token of the latest request, kept only for RFC 8693 token exchange
    /// toward backends configured for it; never forwarded as is.
    subject_token: Mutex<Option<Arc<str>>>,
}

/// One of a session's `max_streams_per_session` stream slots, taken before a
/// request is answered and held by the SSE body while it lives; dropped (slot
/// freed) when the answer turns out to be a plain JSON body.
pub struct StreamSlot(Arc<Session>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0
            .open_streams
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Session {
    /// Takes a stream slot if fewer than `max` are taken: one atomic step, so
    /// concurrent requests cannot all pass a check made before any of them opened
    /// its stream. `Err(n)`: all `n` slots are taken.
    pub fn reserve_stream(self: &Arc<Self>, max: usize) -> Result<StreamSlot, usize> {
        use std::sync::atomic::Ordering;
        self.open_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| StreamSlot(self.clone()))
    }

    /// A new session for a host that sent `initialize`.
    pub fn new(version: ProtocolVersion, client_capabilities: Value, client_info: Value) -> Self {
        let id = new_session_id();
        Session {
            log_id: log_id(&id),
            id,
            version,
            client_capabilities,
            client_info,
            last_seen: Mutex::new(Instant::now()),
            upstreams: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            client_requests: Mutex::new(HashMap::new()),
            next_client_id: AtomicI64::new(1),
            events: EventLog::default(),
            tasks: Mutex::new(HashMap::new()),
            open_streams: std::sync::atomic::AtomicUsize::new(0),
            log_level: Mutex::new(None),
            closed: CancellationToken::new(),
            principal: None,
            view_key: Mutex::new(ViewKey::default()),
            subject_token: Mutex::new(None),
        }
    }

    /// Binds the session to `principal` with its view `key` (at `initialize`).
    pub fn with_principal(mut self, principal: Option<&Principal>, key: ViewKey) -> Self {
        self.principal = principal.map(Principal::id);
        self.view_key = Mutex::new(key);
        self.subject_token = Mutex::new(principal.map(|p| p.token().clone()));
        self
    }

    /// The session's authorization view.
    pub fn view_key(&self) -> ViewKey {
        self.view_key.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// Sets the view key; returns whether it changed.
    pub fn set_view_key(&self, key: ViewKey) -> bool {
        match self.view_key.lock() {
            Ok(mut k) if *k != key => {
                *k = key;
                true
            }
            _ => false,
        }
    }

    /// The host's latest access token (for token exchange only).
    pub fn subject_token(&self) -> Option<Arc<str>> {
        self.subject_token.lock().ok()?.clone()
    }

    /// Records the host's latest access token.
    pub fn set_subject_token(&self, token: Option<Arc<str>>) {
        if let Ok(mut t) = self.subject_token.lock() {
            *t = token;
        }
    }

    /// Records the level set with `logging/setLevel` (one of [`LOG_LEVELS`]).
    pub fn set_log_level(&self, level: &str) {
        if let Ok(mut l) = self.log_level.lock() {
            *l = LOG_LEVELS.iter().position(|x| *x == level);
        }
    }

    /// Whether a `notifications/message` at `level` should reach the host (at or
    /// above the level it set; everything when it set none).
    pub fn wants_log(&self, level: &str) -> bool {
        let min = self.log_level.lock().ok().and_then(|l| *l);
        match (min, LOG_LEVELS.iter().position(|x| *x == level)) {
            (Some(min), Some(at)) => at >= min,
            _ => true,
        }
    }

    /// Marks the session as used now.
    pub fn touch(&self) {
        if let Ok(mut t) = self.last_seen.lock() {
            *t = Instant::now();
        }
    }

    /// When the session was last used.
    pub fn last_seen(&self) -> Instant {
        self.last_seen
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|_| Instant::now())
    }

    /// Whether host requests are in flight (such a session is never idle).
    pub fn is_busy(&self) -> bool {
        self.inflight.lock().is_ok_and(|m| !m.is_empty())
    }

    /// Whether the host declared client capability `name` (e.g. `"sampling"`).
    pub fn has_capability(&self, name: &str) -> bool {
        self.client_capabilities
            .get(name)
            .is_some_and(|v| !v.is_null())
    }

    /// The next id for a server→client request sent to this host.
    pub fn next_client_id(&self) -> Id {
        Id::Num(self.next_client_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a message unrelated to any host request on the standalone (GET)
    /// stream; queued (bounded) until the host opens one.
    pub fn send_unrelated(&self, msg: Bytes) -> bool {
        self.events.push_standalone(msg);
        true
    }

    /// Ends the session's streams and forgets its in-flight state; returns the
    /// per-session backend connections, which the caller closes.
    pub fn end(&self) -> Vec<Arc<Slot>> {
        self.closed.cancel();
        self.events.close_all();
        if let Ok(mut m) = self.client_requests.lock() {
            m.clear();
        }
        match self.upstreams.lock() {
            Ok(mut u) => u.drain().map(|(_, s)| s).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// One host request being served by a backend: where related messages and the
/// response go, and which upstream request it became (for cancellation).
pub struct HostCall {
    /// The session.
    pub session: Arc<Session>,
    /// The host's id for the request.
    pub id: Id,
    /// The host's progress token, if it asked for progress.
    pub progress_token: Option<Value>,
    sink: mpsc::Sender<Outbound>,
    upstream: Mutex<Option<(Weak<Connection>, u64)>>,
    last_progress: Mutex<Option<f64>>,
    cancelled: std::sync::atomic::AtomicBool,
}

impl HostCall {
    /// A call whose messages go to `sink`.
    pub fn new(
        session: Arc<Session>,
        id: Id,
        progress_token: Option<Value>,
        sink: mpsc::Sender<Outbound>,
    ) -> Self {
        HostCall {
            session,
            id,
            progress_token,
            sink,
            upstream: Mutex::new(None),
            last_progress: Mutex::new(None),
            cancelled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Marks the call cancelled by the host. Returns the upstream request it
    /// became, if any, so the caller can cancel that too. A request started after
    /// this sees [`HostCall::is_cancelled`] and gives up by itself.
    pub fn mark_cancelled(&self) -> Option<(Arc<Connection>, u64)> {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.upstream()
    }

    /// Whether the host cancelled this call.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records the upstream request this call became.
    pub fn set_upstream(&self, conn: Weak<Connection>, id: u64) {
        if let Ok(mut u) = self.upstream.lock() {
            *u = Some((conn, id));
        }
    }

    /// The upstream request, if it is still known.
    pub fn upstream(&self) -> Option<(Arc<Connection>, u64)> {
        let u = self.upstream.lock().ok()?;
        let (conn, id) = u.as_ref()?;
        Some((conn.upgrade()?, *id))
    }

    /// Accepts a progress value only if it increases (MCP basic/utilities/progress:
    /// progress MUST increase with each notification).
    pub fn accept_progress(&self, progress: f64) -> bool {
        let Ok(mut last) = self.last_progress.lock() else {
            return false;
        };
        if last.is_some_and(|l| progress <= l) {
            return false;
        }
        *last = Some(progress);
        true
    }

    /// Sends a related message to the host (dropped, and counted, if the host is
    /// not reading).
    pub fn send_related(&self, msg: Bytes) -> bool {
        let sent = self.sink.try_send(Outbound::Message(msg));
        if matches!(sent, Err(mpsc::error::TrySendError::Full(_))) {
            tracing::debug!("host call queue full; related message dropped");
            self.session.events.count_drop();
        }
        sent.is_ok()
    }

    /// Sends the response; returns false if the host no longer listens.
    pub async fn finish(&self, msg: Bytes) -> bool {
        self.sink.send(Outbound::Final(msg)).await.is_ok()
    }
}
