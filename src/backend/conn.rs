//! One MCP client connection to one backend: id allocation, correlation of
//! responses and dispatch of what the backend sends (its handshake is
//! `handshake.rs`).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::listen;
use super::modern::{self, EraCache};
use super::{BackendError, Caller, Link, Mirrored, UpstreamHandler};
use crate::jsonrpc::{self, ErrorObject, Id, Params, RawJson};
use crate::mcp::{Message, Method, Notification, ProtocolVersion};
use crate::telemetry::ClientSpan;

/// What the backend said about itself in its `initialize` result.
#[derive(Debug, Clone)]
pub struct InitInfo {
    /// The revision negotiated with this backend (sent in `MCP-Protocol-Version`).
    pub version: ProtocolVersion,
    /// The backend's server capabilities, unparsed.
    pub capabilities: Value,
    /// `instructions`, if any.
    pub instructions: Option<String>,
}

impl InitInfo {
    /// Whether the backend declared server capability `name` (e.g. `"tools"`).
    pub fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }
}

/// Who a connection belongs to (shared or one host session's). The client face does not
/// know what an owner is; it only needs to know whether every request on the
/// connection comes from one client, which makes "the only request in flight"
/// a safe guess for any message the backend sends without saying what it relates
/// to. On a shared connection that guess is made only for server→client requests
/// and log messages, and only when exactly one call is in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Serves every client (or the gateway itself, for catalogues).
    Shared,
    /// Bound to exactly one client, named by an opaque key of the caller's.
    Exclusive(Arc<str>),
}

struct Pending {
    tx: oneshot::Sender<Result<RawJson, ErrorObject>>,
    call: Option<Arc<dyn Caller>>,
}

/// A live MCP client session with one backend, over stdio or HTTP.
///
/// Requests get gateway-assigned integer ids (unique per connection), so host ids
/// from many sessions never collide upstream (MCP basic/index: ids are unique per
/// requestor). The upstream progress token of a call is its upstream id.
pub struct Connection {
    /// Configured backend name (logs and errors).
    pub backend: Arc<str>,
    /// Owner of this connection.
    pub owner: Owner,
    pub(super) handler: Arc<dyn UpstreamHandler>,
    pub(super) link: OnceLock<Link>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    pub(super) info: OnceLock<InitInfo>,
    /// Client capabilities declared in `initialize` (kept for re-initialization).
    pub(super) capabilities: Value,
    /// Per-call timeout for this backend (shared with its spec: a reload may
    /// change it).
    timeout: Arc<super::CallTimeout>,
    /// Cancelled when the connection is closed or its transport died.
    pub closed: CancellationToken,
    /// Set when the gateway itself is closing the connection.
    closing: std::sync::atomic::AtomicBool,
    /// Set when the backend was told something only one host may see (see
    /// [`Connection::retire`]).
    retired: std::sync::atomic::AtomicBool,
    /// Last use: handed to a call, a request sent or an answer received
    /// ([`Connection::touch`]; idle reaping and reclaim).
    last_used: Mutex<tokio::time::Instant>,
    /// Why the connection closed (for the errors of requests it leaves unanswered).
    close_reason: OnceLock<String>,
    /// `Some`: the backend is spoken to statelessly at this revision (no
    /// `initialize`; `_meta` on every request). Changes only during the handshake
    /// of a probing stdio connection that falls back to `initialize`.
    pub(super) modern: Mutex<Option<ProtocolVersion>>,
    /// The backend's cached era, forgotten when this connection finds it wrong.
    era_cache: Option<Arc<EraCache>>,
    /// A modern backend's listen (list changes, resource subscriptions).
    pub(super) watch: super::listen::Watch,
    /// Where a per-session HTTP connection's backend session is recorded.
    pub(super) recorder: OnceLock<Arc<dyn super::SessionRecorder>>,
    /// Who may open the GET stream on a backend session shared by processes.
    pub(super) listen_gate: OnceLock<Arc<dyn super::ListenGate>>,
}

impl Connection {
    /// A connection without a transport yet; the transport module attaches one.
    pub(super) fn new(
        backend: Arc<str>,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        timeout: Arc<super::CallTimeout>,
        modern: Option<ProtocolVersion>,
    ) -> Self {
        Connection {
            modern: Mutex::new(modern),
            era_cache: None,
            capabilities,
            timeout,
            backend,
            owner,
            handler,
            link: OnceLock::new(),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            info: OnceLock::new(),
            closed: CancellationToken::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            retired: std::sync::atomic::AtomicBool::new(false),
            last_used: Mutex::new(tokio::time::Instant::now()),
            close_reason: OnceLock::new(),
            watch: super::listen::Watch::default(),
            recorder: OnceLock::new(),
            listen_gate: OnceLock::new(),
        }
    }

    /// Lets this connection forget the backend's cached era when it finds it wrong.
    pub(super) fn with_era_cache(mut self, cache: Arc<EraCache>) -> Self {
        self.era_cache = Some(cache);
        self
    }

    /// The revision of a stateless (2026-07-28) connection; `None`: legacy.
    pub fn modern(&self) -> Option<ProtocolVersion> {
        self.modern.lock().ok().and_then(|m| *m)
    }

    /// Whether this is a stateless connection over HTTP (no notifications exist
    /// there; closing a response stream cancels its request).
    fn modern_http(&self) -> bool {
        self.modern().is_some() && matches!(self.link.get(), Some(Link::Http(_)))
    }

    /// The revision spoken on this connection: the negotiated one, or the modern
    /// one before `server/discover` answered.
    pub(super) fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.info().map(|i| i.version).or(self.modern())
    }

    /// The cached era was wrong: forget it and close (the next connection probes).
    pub(super) fn era_was_wrong(self: &Arc<Self>, why: &str) {
        let Some(cache) = &self.era_cache else {
            return;
        };
        tracing::info!(backend = %self.backend, cause = why, "backend answered in another protocol era; probing again");
        cache.forget();
        self.fail_all(why);
    }

    /// The backend's `initialize` answer. Set once the handshake completed.
    pub fn info(&self) -> Option<&InitInfo> {
        self.info.get()
    }

    /// The backend's own session for this connection (its `Mcp-Session-Id` and
    /// negotiated revision), for Streamable HTTP backends that gave one.
    pub fn upstream_session(&self) -> Option<(String, ProtocolVersion)> {
        let id = self.link.get()?.session_id()?;
        Some((id, self.info()?.version))
    }

    /// The key of the one client this connection serves (`None`: shared).
    pub fn owner_key(&self) -> Option<&Arc<str>> {
        match &self.owner {
            Owner::Shared => None,
            Owner::Exclusive(key) => Some(key),
        }
    }

    /// The access token of the client that owns this connection, for backends
    /// whose credentials are exchanged for it (RFC 8693); asked of the handler.
    pub fn subject_token(&self) -> Option<Arc<str>> {
        self.handler.subject_token(self)
    }

    /// Marks the connection used now (handed to a call, request sent, answer got).
    pub fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = tokio::time::Instant::now();
        }
    }

    /// How long since the connection was last used ([`Connection::touch`]).
    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    /// Whether the gateway is closing this connection on purpose.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Marks the connection as holding what one host told its backend (the host's
    /// roots: a backend may keep them for every later call of its session). It
    /// finishes the calls in flight, but a pool hands it to no new request, so one
    /// host's roots never serve another's call (`supervisor` pooled connections
    /// of 2026-07-28 hosts; a session's own connection serves only that session).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Whether [`Connection::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// Whether the transport is still usable.
    pub fn is_alive(&self) -> bool {
        !self.closed.is_cancelled()
    }

    /// Number of requests awaiting an answer.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    pub(super) fn link(&self) -> Result<&Link, BackendError> {
        self.link
            .get()
            .ok_or_else(|| BackendError::closed(&self.backend, "not started"))
    }

    /// Sends a request and waits for its result, at most `timeout`.
    ///
    /// `call` ties the request to a host request: backend messages related to it
    /// (progress, logs, server→client requests) are relayed there. When the call has
    /// a host progress token, the upstream request carries the upstream id as token.
    ///
    /// Errors: [`BackendError::Rpc`] for a JSON-RPC error from the backend (to be
    /// passed on unchanged), [`BackendError::Timeout`] after `timeout` (a
    /// `notifications/cancelled` is then sent upstream, MCP basic/lifecycle
    /// timeouts), transport failures otherwise. Dropping the future forgets the
    /// request (a late answer is discarded) without telling the backend.
    pub async fn request(
        self: &Arc<Self>,
        method: &Method,
        params: Option<Value>,
        call: Option<Arc<dyn Caller>>,
        timeout: Duration,
    ) -> Result<RawJson, BackendError> {
        let params = params.map(|p| Cow::Owned(p.into()));
        self.request_with(method, params, call, timeout).await
    }

    /// [`Connection::request`] with params that may be borrowed (text written as
    /// it is): cloned only when the request must change them (token, envelope, trace).
    pub async fn request_with(
        self: &Arc<Self>,
        method: &Method,
        mut params: Option<Cow<'_, Params>>,
        call: Option<Arc<dyn Caller>>,
        timeout: Duration,
    ) -> Result<RawJson, BackendError> {
        let link = self.link()?;
        if self.closed.is_cancelled() {
            return Err(BackendError::closed(&self.backend, "connection closed"));
        }
        let method = match self.modern().map(|_| modern::stateless(method)) {
            Some(modern::Stateless::Send(m)) => m,
            Some(modern::Stateless::Answer(v)) => return Ok(v),
            Some(modern::Stateless::Watch(on)) => {
                return listen::resource(self, params.as_deref().map(|p| &**p), on).await;
            }
            None => method,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.touch();
        if call.as_ref().is_some_and(|c| c.wants_progress()) {
            modern::set_progress_token(&mut params, id);
        }
        if let Some(version) = self.modern() {
            let level = call.as_ref().and_then(|c| c.log_level());
            let caps = call.as_ref().and_then(|c| c.client_capabilities());
            modern::stamp_envelope(&mut params, version, caps, level);
        }
        let mirrored = match self.modern() {
            Some(_) => Mirrored::new(method, params.as_deref().map(|p| &**p), call.as_deref()),
            None => Mirrored::default(),
        };
        let (tx, rx) = oneshot::channel();
        let caller = call.clone();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, Pending { tx, call });
        }
        let guard = PendingGuard { conn: self, id };
        let parent = caller.as_ref().and_then(|c| c.trace_parent());
        // Told after the pending entry exists, so a cancel that comes later finds
        // it; a cancel that came earlier makes `started` answer false.
        if let Some(c) = caller
            && !c.started(self, id)
        {
            return Err(BackendError::Cancelled);
        }
        let span = parent.map(|parent| {
            let transport = link.network_transport();
            ClientSpan::start(parent, &self.backend, method, id, transport, &mut params)
        });
        let bytes =
            jsonrpc::request_params_bytes(&Id::Num(id as i64), method.as_str(), params.as_deref());
        let exchange = self.exchange(link, id, method, &mirrored, bytes, rx);
        let outcome = match &span {
            Some(s) => tokio::time::timeout(timeout, exchange.instrument(s.span().clone())).await,
            None => tokio::time::timeout(timeout, exchange).await,
        };
        // Used until now (a long call ends not idle), before the entry goes.
        self.touch();
        drop(guard);
        let result = match outcome {
            Ok(r) => r,
            Err(_) => {
                self.send_cancel(id, "mcpgate: request timed out");
                Err(BackendError::Timeout {
                    backend: self.backend.to_string(),
                    after: timeout,
                })
            }
        };
        if let Some(s) = span {
            let (error, code) = result
                .as_ref()
                .map_or_else(|e| e.span_outcome(), |_| (None, None));
            s.finish(error.as_deref(), code);
        }
        result
    }

    /// Sends one request and waits for its answer. The answer may come while the
    /// response stream is still open; a cancel (the pending entry removed) ends
    /// the wait and drops the stream, which is how a stateless HTTP request is
    /// cancelled.
    async fn exchange(
        self: &Arc<Self>,
        link: &Link,
        id: u64,
        method: &Method,
        mirrored: &Mirrored,
        bytes: Vec<u8>,
        mut rx: oneshot::Receiver<Result<RawJson, ErrorObject>>,
    ) -> Result<RawJson, BackendError> {
        let answer = tokio::select! {
            biased;
            got = &mut rx => got,
            sent = link.send_request(self, id, method, mirrored, bytes) => {
                sent?;
                rx.await
            }
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(BackendError::Rpc(e)),
            Err(_) if self.closed.is_cancelled() => Err(BackendError::closed(
                &self.backend,
                self.close_reason
                    .get()
                    .map_or("connection closed", String::as_str),
            )),
            Err(_) => Err(BackendError::Cancelled),
        }
    }

    /// Host-side cancellation of upstream request `id`: forgets it (a late answer is
    /// dropped, the waiting caller sees [`BackendError::Cancelled`]) and sends
    /// `notifications/cancelled` upstream (MCP basic/utilities/cancellation).
    pub fn cancel(self: &Arc<Self>, id: u64, reason: Option<&str>) {
        let removed = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if removed.is_some() {
            self.send_cancel(id, reason.unwrap_or("cancelled by the client"));
        }
    }

    /// Like [`Connection::cancel`], but waits (at most `limit`) until the
    /// transport took the `notifications/cancelled` (HTTP: answered 2xx), so
    /// that what follows — the `DELETE` of the backend session — cannot
    /// overtake it.
    pub async fn cancel_awaited(self: &Arc<Self>, id: u64, reason: &str, limit: Duration) {
        let removed = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if removed.is_none() || self.modern_http() {
            return;
        }
        let params = json!({"requestId": id, "reason": reason});
        let bytes = jsonrpc::notification_bytes(Method::Cancelled.as_str(), Some(&params));
        if let Ok(link) = self.link()
            && let Ok(Err(e)) = tokio::time::timeout(limit, link.send_awaited(self, bytes)).await
        {
            tracing::debug!(backend = %self.backend, cause = %e, "cancel not delivered");
        }
    }

    fn send_cancel(self: &Arc<Self>, id: u64, reason: &str) {
        if self.modern_http() {
            // Stateless HTTP: closing the request's response stream is the
            // cancellation (MCP 2026-07-28 basic/patterns/cancellation).
            return;
        }
        let params = json!({"requestId": id, "reason": reason});
        self.notify(&Method::Cancelled, Some(&params));
    }

    /// Sends a notification (fire and forget; failures are logged). A stateless
    /// backend gets only `notifications/cancelled`, and over HTTP none at all
    /// (2026-07-28 removed the others and defines none over HTTP).
    pub fn notify(self: &Arc<Self>, method: &Method, params: Option<&Value>) {
        if self.modern_http() || (self.modern().is_some() && *method != Method::Cancelled) {
            tracing::debug!(backend = %self.backend, %method, "notification not sent to a stateless HTTP backend");
            return;
        }
        let bytes = jsonrpc::notification_bytes(method.as_str(), params);
        self.send_detached(bytes);
    }

    /// Answers a request the backend sent us (server→client).
    pub fn respond(self: &Arc<Self>, id: &Id, outcome: Result<&Value, &ErrorObject>) {
        let bytes = match outcome {
            Ok(v) => jsonrpc::result_value_bytes(id, v),
            Err(e) => jsonrpc::error_bytes(Some(id), e),
        };
        self.send_detached(bytes);
    }

    fn send_detached(self: &Arc<Self>, bytes: Vec<u8>) {
        if let Ok(link) = self.link() {
            link.send_detached(self, bytes);
        }
    }

    /// Whether upstream request `id` still awaits its answer.
    pub(super) fn is_pending(&self, id: u64) -> bool {
        self.pending.lock().is_ok_and(|p| p.contains_key(&id))
    }

    /// The per-call timeout for this backend.
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// Handles one message read from the backend. `related` is the upstream id of
    /// the request on whose HTTP response stream it arrived, if any.
    pub(super) fn on_message(self: &Arc<Self>, msg: Message, related: Option<u64>) {
        match msg {
            Message::Response(r) => {
                let Some(Id::Num(n)) = r.id else {
                    tracing::warn!(backend = %self.backend, id = ?r.id.as_ref().map(|i| i.logged().to_string()), "response with an id we never sent; dropped");
                    return;
                };
                // Before the entry goes: never nothing in flight and stale use.
                self.touch();
                let entry = self
                    .pending
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&(n as u64)));
                match entry {
                    Some(p) => {
                        let _ = p.tx.send(r.outcome);
                    }
                    None => {
                        tracing::debug!(backend = %self.backend, id = n, "late or unknown response dropped")
                    }
                }
            }
            Message::Notification(n) => {
                let Some(n) = listen::intercept(self, n) else {
                    return;
                };
                let call = self.related_call(&n, related);
                self.handler.on_notification(self, call, n);
            }
            Message::Request(r) => {
                let call = self.related_call_for(related, true);
                self.handler.on_request(self, call, r);
            }
        }
    }

    /// The host call a notification belongs to: by progress token, by the stream it
    /// came on, or the only host call in flight (on a shared connection only for
    /// `notifications/message`, see [`Connection::related_call_for`]).
    fn related_call(&self, n: &Notification, related: Option<u64>) -> Option<Arc<dyn Caller>> {
        if n.method == Method::Progress {
            let token = n.params.as_ref().and_then(|p| p.get("progressToken"));
            let id = token.and_then(Value::as_u64)?;
            let p = self.pending.lock().ok()?;
            return p.get(&id).and_then(|e| e.call.clone());
        }
        self.related_call_for(related, n.method == Method::LogMessage)
    }

    /// The call a message relates to: the request whose HTTP response stream it
    /// came on, else the only request with a caller in flight. On a shared
    /// connection that guess is made only for what needs a host to be useful at
    /// all (`guess_shared`: server→client requests and log messages); when none or
    /// several calls are in flight the answer is `None`, never a guess among them.
    /// (A backend that sends such messages from background work, after the
    /// answer of the call that caused them, can be attributed to another lone
    /// call; that is why stateful backends belong in `per_session` mode.)
    fn related_call_for(
        &self,
        related: Option<u64>,
        guess_shared: bool,
    ) -> Option<Arc<dyn Caller>> {
        let p = self.pending.lock().ok()?;
        if let Some(id) = related {
            return p.get(&id).and_then(|e| e.call.clone());
        }
        if matches!(self.owner, Owner::Shared) && !guess_shared {
            return None;
        }
        let mut calls = p
            .values()
            .filter_map(|e| e.call.as_ref().filter(|c| !c.background()));
        let only = calls.next()?;
        calls.next().is_none().then(|| only.clone())
    }

    /// Fails every waiting request and marks the connection closed. The waiting
    /// callers see [`BackendError::Unavailable`] with `why` (a failure of the
    /// backend, not a JSON-RPC error it answered).
    pub(super) fn fail_all(self: &Arc<Self>, why: &str) {
        if self.closed.is_cancelled() {
            return;
        }
        let _ = self.close_reason.set(why.to_owned());
        self.closed.cancel();
        let drained: Vec<Pending> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        // Dropping the senders wakes every waiting request (see `request`).
        drop(drained);
        self.handler.on_closed(self);
    }

    /// Closes the connection: ends the backend session (HTTP `DELETE`) or stops the
    /// child process (close stdin, wait, SIGTERM, SIGKILL).
    pub async fn close(self: &Arc<Self>) {
        self.closing.store(true, Ordering::Relaxed);
        if let Some(link) = self.link.get() {
            link.close(self).await;
        }
        self.fail_all("connection closed");
    }

    /// Closes the connection but leaves a Streamable HTTP backend's session
    /// alive (no `DELETE`): at a drain, when other gateway replicas go on
    /// serving the host session. A stdio child is stopped as by
    /// [`Connection::close`].
    pub async fn release(self: &Arc<Self>) {
        self.closing.store(true, Ordering::Relaxed);
        if let Some(link) = self.link.get() {
            link.release(self).await;
        }
        self.fail_all("connection released");
    }

    /// Weak handle for tasks that must not keep the connection alive.
    pub(super) fn downgrade(self: &Arc<Self>) -> Weak<Connection> {
        Arc::downgrade(self)
    }
}

/// Removes a pending entry when the caller stops waiting (timeout or drop).
struct PendingGuard<'a> {
    conn: &'a Connection,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.conn.pending.lock() {
            p.remove(&self.id);
        }
    }
}
