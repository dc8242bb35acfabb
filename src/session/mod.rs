//! Host sessions (MCP 2025-11-25 basic/transports, session management).
//!
//! A [`Session`] has two parts. The durable part ([`SessionRecord`]) is plain data:
//! who created it, the negotiated revision, the host's capabilities, and what the
//! host changed since (log level, backend sessions, subscriptions, tasks). The
//! live part is bound to this process: backend connections, SSE streams and their
//! event log, host calls in flight, relayed server→client requests. Callers use
//! named operations; the fields are private (like mini-redis's `Db`).
//!
//! Locks are `std::sync::Mutex`: each is held for a map operation only, never
//! across an `.await`.

mod call;
mod forward;
mod host;
mod owner;
mod record;
mod store;
mod token;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use foldhash::HashMap;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

pub use call::{Ask, ClientRequest, HostAnswer, HostCall, Outbound};
pub use forward::{Forward, ForwardQueue, forward_channel};
pub use host::{Host, ModernHost};
pub use record::{SessionRecord, TaskRoute, UpstreamSession};
pub use store::{MemoryStore, SessionStore};
pub use token::{Identity, SessionToken, unix_now};

use crate::auth::policy::ViewKey;
use crate::auth::{Principal, PrincipalId};
use crate::backend::{Connection, Slot};
use crate::jsonrpc::Id;
use crate::mcp::{LogLevel, ProtocolVersion};
use crate::streamable_http::EventLog;

/// A short, non-reversible form of a session id for logs (ids are bearer secrets).
pub fn log_id(id: &str) -> String {
    let d = <sha2::Sha256 as sha2::Digest>::digest(id.as_bytes());
    d[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// What of the durable record changes after `initialize`.
#[derive(Default)]
struct Changes {
    log_level: Option<LogLevel>,
    upstream_sessions: std::collections::BTreeMap<String, UpstreamSession>,
    subscriptions: std::collections::BTreeSet<(String, String)>,
    tasks: std::collections::BTreeMap<String, TaskRoute>,
}

const FRESH: u8 = 0;
const USED: u8 = 1;
const EVICTING: u8 = 2;

/// The process-bound part of a session.
struct Live {
    /// When `initialize` created the session (connection mode `auto` decides by it).
    created: Instant,
    last_seen: Mutex<Instant>,
    /// `FRESH` until the host's first use after `initialize` (a request, a batch
    /// with one, a GET stream), then `USED`; `EVICTING`: claimed to make room.
    used: AtomicU8,
    /// Per-session backend connections, by backend registry index.
    upstreams: Mutex<HashMap<usize, Arc<Slot>>>,
    /// Host requests being served, by host id (for cancellation).
    inflight: Mutex<HashMap<Id, Arc<HostCall>>>,
    /// Server→client requests awaiting the host's answer, by the id the host saw.
    client_requests: Mutex<HashMap<Id, ClientRequest>>,
    next_client_id: AtomicI64,
    events: EventLog,
    /// Where unrelated messages go while this process does not produce the
    /// standalone stream (set with a shared store).
    forward: OnceLock<Forward>,
    /// Stream slots taken (see [`Session::reserve_stream`]).
    open_streams: AtomicUsize,
    /// Cancelled when the session ends (DELETE, expiry, shutdown).
    closed: CancellationToken,
    /// The authorization view, re-derived from the token on every request.
    view_key: Mutex<ViewKey>,
    /// The token of the latest request, kept only for RFC 8693 token exchange
    /// toward backends configured for it; never forwarded as is.
    subject_token: Mutex<Option<Arc<str>>>,
    /// Unix second this process last slid the session's expiry in the shared
    /// store (0: never).
    store_refreshed: AtomicU32,
    /// Whether this process owns the session's per-session stdio children in
    /// the shared store (`own`): its requests for them then cost no round trip.
    /// [`owner::NOT_OWNED`], [`owner::OWNED`] or [`owner::FENCED`].
    owned: AtomicU8,
    /// Whether, with a shared store, another replica's per-session children
    /// list for this session what their backends' catalogues do not (the
    /// record's `ol`): its list requests then go to that owner.
    lists_elsewhere: AtomicBool,
}

/// One host session; see the module docs.
pub struct Session {
    /// The sealed `Mcp-Session-Id` (`token.rs`); the store key.
    id: Arc<str>,
    identity: Identity,
    log_id: String,
    /// The key of the session's record in the shared store, computed once:
    /// broadcasts name sessions by it.
    store_key: String,
    principal: Option<PrincipalId>,
    /// The address of the client that opened (or restored) it, if known.
    client: Option<std::net::IpAddr>,
    /// The `[endpoints.NAME]` it was opened at (`""`: `server.path`); it is
    /// unknown at every other endpoint.
    endpoint: Arc<str>,
    version: ProtocolVersion,
    client_capabilities: Value,
    client_info: Value,
    changes: Mutex<Changes>,
    live: Live,
}

/// One of a session's `max_streams_per_session` stream slots, taken before a
/// request is answered and held by the SSE body while it lives; dropped (slot
/// freed) when the answer turns out to be a plain JSON body.
pub struct StreamSlot(Arc<Session>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.live.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Session {
    /// A session under `id` (sealed from a [`SessionToken`] of `identity`): one a
    /// host just initialized, or one restored from its id (then `client_info` is
    /// unknown and the capabilities are those of the id's bits).
    pub fn new(
        id: Arc<str>,
        identity: Identity,
        version: ProtocolVersion,
        client_capabilities: Value,
        client_info: Value,
    ) -> Self {
        Session {
            log_id: log_id(&id),
            store_key: crate::cluster::record_key(&identity.rand),
            id,
            identity,
            principal: None,
            client: None,
            endpoint: Arc::from(""),
            version,
            client_capabilities,
            client_info,
            changes: Mutex::default(),
            live: Live {
                created: Instant::now(),
                last_seen: Mutex::new(Instant::now()),
                used: AtomicU8::new(FRESH),
                upstreams: Mutex::default(),
                inflight: Mutex::default(),
                client_requests: Mutex::default(),
                next_client_id: AtomicI64::new(1),
                events: EventLog::default(),
                forward: OnceLock::new(),
                open_streams: AtomicUsize::new(0),
                closed: CancellationToken::new(),
                view_key: Mutex::new(ViewKey::default()),
                subject_token: Mutex::new(None),
                store_refreshed: AtomicU32::new(0),
                owned: AtomicU8::new(owner::NOT_OWNED),
                lists_elsewhere: AtomicBool::new(false),
            },
        }
    }

    /// Binds the session to `principal` with its view `key` (at `initialize`).
    pub fn with_principal(mut self, principal: Option<&Principal>, key: ViewKey) -> Self {
        self.principal = principal.map(Principal::id);
        self.live.view_key = Mutex::new(key);
        self.live.subject_token = Mutex::new(principal.map(|p| p.token().clone()));
        self
    }

    /// Opens the session at endpoint `endpoint` (`[endpoints.NAME]`).
    pub fn at_endpoint(mut self, endpoint: Arc<str>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// Records the address of the client that opened (or restored) it.
    pub fn opened_by(mut self, client: Option<std::net::IpAddr>) -> Self {
        self.client = client;
        self
    }

    /// The client's address, if known ([`Session::opened_by`]).
    pub fn client(&self) -> Option<std::net::IpAddr> {
        self.client
    }

    /// The endpoint the session belongs to (`""`: `server.path`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The `Mcp-Session-Id` (a bearer secret: never log it, use [`Session::log_id`]).
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// A short hash of the id, for logs.
    pub fn log_id(&self) -> &str {
        &self.log_id
    }

    /// Who the session is, as its id carries it.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The revision negotiated with the host.
    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    /// The principal that created the session (`None`: open endpoint).
    pub fn principal(&self) -> Option<&PrincipalId> {
        self.principal.as_ref()
    }

    /// The host's `initialize` capabilities.
    pub fn client_capabilities(&self) -> &Value {
        &self.client_capabilities
    }

    /// Whether the host declared client capability `name` (e.g. `"sampling"`) and
    /// its revision has it (`ProtocolVersion::knows_client_capability`).
    pub fn has_capability(&self, name: &str) -> bool {
        self.version.knows_client_capability(name)
            && self
                .client_capabilities
                .get(name)
                .is_some_and(|v| !v.is_null())
    }

    /// The session's key in the shared store (`cluster::record_key` of its
    /// identity: no secret, stable across key rotations).
    pub fn store_key(&self) -> &str {
        &self.store_key
    }

    /// Whether this process should slide the session's expiry in the shared
    /// store at Unix second `now`: when `every` seconds passed since it last
    /// did; of concurrent callers one wins.
    pub fn claim_refresh(&self, now: u32, every: u32) -> bool {
        let at = &self.live.store_refreshed;
        let last = at.load(Ordering::Relaxed);
        now.saturating_sub(last) >= every
            && at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// The durable part, as plain data: what the shared store holds
    /// (`SessionRecord::to_fields`).
    pub fn record(&self) -> SessionRecord {
        let mut r = SessionRecord::new(
            self.version,
            self.client_capabilities.clone(),
            self.client_info.clone(),
        );
        r.principal = self.principal.clone();
        if let Ok(c) = self.changes.lock() {
            r.log_level = c.log_level;
            r.upstream_sessions = c.upstream_sessions.clone();
            r.subscriptions = c.subscriptions.clone();
            r.tasks = c.tasks.clone();
        }
        r
    }

    fn change<T>(&self, f: impl FnOnce(&mut Changes) -> T) -> Option<T> {
        self.changes.lock().ok().map(|mut c| f(&mut c))
    }

    // --- durable changes ------------------------------------------------------

    /// Records the level set with `logging/setLevel`.
    pub fn set_log_level(&self, level: LogLevel) {
        self.change(|c| c.log_level = Some(level));
    }

    /// The level set with `logging/setLevel`, if any.
    pub fn log_level(&self) -> Option<LogLevel> {
        self.change(|c| c.log_level).flatten()
    }

    /// Whether a `notifications/message` at `level` (wire name) should reach the
    /// host: at or above the level it set; everything when it set none, or when
    /// the level is not one MCP defines.
    pub fn wants_log(&self, level: &str) -> bool {
        let min = self.change(|c| c.log_level).flatten();
        match (min, LogLevel::parse(level)) {
            (Some(min), Some(at)) => at >= min,
            _ => true,
        }
    }

    /// Records the backend session opened for this session on backend `backend`.
    pub fn set_upstream_session(&self, backend: &str, upstream: Option<UpstreamSession>) {
        self.change(|c| match upstream {
            Some(u) => c.upstream_sessions.insert(backend.to_owned(), u),
            None => c.upstream_sessions.remove(backend),
        });
    }

    /// Records a resource subscription (`subscribed = false`: its end).
    pub fn note_subscription(&self, backend: &str, uri: &str, subscribed: bool) {
        let key = (backend.to_owned(), uri.to_owned());
        self.change(|c| {
            if subscribed {
                c.subscriptions.insert(key);
            } else {
                c.subscriptions.remove(&key);
            }
        });
    }

    /// Registers a task this session created, under its exposed id.
    pub fn add_task(&self, exposed: &str, route: TaskRoute) {
        self.change(|c| c.tasks.insert(exposed.to_owned(), route));
    }

    /// Where the session's task `exposed` leads.
    pub fn task(&self, exposed: &str) -> Option<TaskRoute> {
        self.change(|c| c.tasks.get(exposed).cloned()).flatten()
    }

    /// Whether the session created the task exposed as `exposed`.
    pub fn owns_task(&self, exposed: &str) -> bool {
        self.change(|c| c.tasks.contains_key(exposed))
            .unwrap_or(false)
    }

    /// Every task of the session: (exposed id, route).
    pub fn tasks(&self) -> Vec<(String, TaskRoute)> {
        self.change(|c| {
            c.tasks
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
    }

    // --- liveness and identity of the caller ----------------------------------

    /// When the session was created (`initialize`).
    pub fn created(&self) -> Instant {
        self.live.created
    }

    /// Marks the session as used now.
    pub fn touch(&self) {
        if let Ok(mut t) = self.live.last_seen.lock() {
            *t = Instant::now();
        }
    }

    /// Records that the host used the session (a request, or a GET stream);
    /// `false`: claimed for eviction ([`Session::claim_unused`]), answer 404.
    pub fn mark_used(&self) -> bool {
        matches!(self.leave_fresh(USED), Ok(_) | Err(USED))
    }

    /// Whether the host never used the session and no eviction claimed it.
    pub fn is_fresh(&self) -> bool {
        self.live.used.load(Ordering::Acquire) == FRESH
    }

    /// Claims a fresh session for eviction; `false` once used (or claimed).
    pub fn claim_unused(&self) -> bool {
        self.leave_fresh(EVICTING).is_ok()
    }

    fn leave_fresh(&self, to: u8) -> Result<u8, u8> {
        (self.live.used).compare_exchange(FRESH, to, Ordering::AcqRel, Ordering::Acquire)
    }

    /// When the session was last used.
    pub fn last_seen(&self) -> Instant {
        self.live
            .last_seen
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|_| Instant::now())
    }

    /// The session's authorization view.
    pub fn view_key(&self) -> ViewKey {
        self.live
            .view_key
            .lock()
            .map(|k| k.clone())
            .unwrap_or_default()
    }

    /// Sets the view key; returns whether it changed.
    pub fn set_view_key(&self, key: ViewKey) -> bool {
        match self.live.view_key.lock() {
            Ok(mut k) if *k != key => {
                *k = key;
                true
            }
            _ => false,
        }
    }

    /// The host's latest access token (for token exchange only).
    pub fn subject_token(&self) -> Option<Arc<str>> {
        self.live.subject_token.lock().ok()?.clone()
    }

    /// Records the host's latest access token.
    pub fn set_subject_token(&self, token: Option<Arc<str>>) {
        if let Ok(mut t) = self.live.subject_token.lock() {
            *t = token;
        }
    }

    // --- streams --------------------------------------------------------------

    /// The session's SSE streams and the events recorded for resumption.
    pub fn events(&self) -> &EventLog {
        &self.live.events
    }

    /// Takes a stream slot if fewer than `max` are taken: one atomic step, so
    /// concurrent requests cannot all pass a check made before any of them opened
    /// its stream. `Err(n)`: all `n` slots are taken.
    pub fn reserve_stream(self: &Arc<Self>, max: usize) -> Result<StreamSlot, usize> {
        self.live
            .open_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| StreamSlot(self.clone()))
    }

    // --- host calls in flight -------------------------------------------------

    /// Registers a host call. `false`: a call with that id is already in flight
    /// (ids are unique per requestor, MCP basic/index).
    pub fn start_call(&self, call: &Arc<HostCall>) -> bool {
        let Ok(mut m) = self.live.inflight.lock() else {
            return false;
        };
        if m.contains_key(&call.id) {
            return false;
        }
        m.insert(call.id.clone(), call.clone());
        true
    }

    /// Forgets host call `id`; the call, if it was still in flight.
    pub fn take_call(&self, id: &Id) -> Option<Arc<HostCall>> {
        self.live.inflight.lock().ok()?.remove(id)
    }

    /// Whether host request `id` is still in flight as `call` (not cancelled).
    pub fn is_current_call(&self, id: &Id, call: &Arc<HostCall>) -> bool {
        self.live
            .inflight
            .lock()
            .is_ok_and(|m| m.get(id).is_some_and(|c| Arc::ptr_eq(c, call)))
    }

    /// The host requests in flight.
    pub fn calls(&self) -> Vec<Arc<HostCall>> {
        self.live
            .inflight
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Number of host requests in flight.
    pub fn calls_in_flight(&self) -> usize {
        self.live.inflight.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether host requests are in flight (such a session is never idle).
    pub fn is_busy(&self) -> bool {
        self.calls_in_flight() > 0
    }

    // --- relayed server→client requests ---------------------------------------

    /// The next id for a server→client request sent to this host.
    pub fn next_client_id(&self) -> Id {
        Id::Num(self.live.next_client_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Remembers a relayed request under the id the host saw.
    pub fn add_client_request(&self, ours: Id, request: ClientRequest) {
        if let Ok(mut m) = self.live.client_requests.lock() {
            m.insert(ours, request);
        }
    }

    /// Forgets the relayed request the host saw as `ours` and returns it.
    pub fn take_client_request(&self, ours: &Id) -> Option<ClientRequest> {
        self.live.client_requests.lock().ok()?.remove(ours)
    }

    /// Forgets the relayed request that `conn` sent as `upstream` and returns the
    /// id the host saw.
    pub fn take_client_request_from(&self, conn: &Arc<Connection>, upstream: &Id) -> Option<Id> {
        let mut m = self.live.client_requests.lock().ok()?;
        let conn = Arc::downgrade(conn);
        let key = m
            .iter()
            .find(|(_, r)| match r {
                ClientRequest::Backend {
                    conn: c,
                    upstream_id,
                } => upstream_id == upstream && c.ptr_eq(&conn),
                ClientRequest::Gateway(_) => false,
            })
            .map(|(k, _)| k.clone())?;
        m.remove(&key).map(|_| key)
    }

    // --- per-session backend connections --------------------------------------

    /// The slot for this session's own connection to backend `idx` (created empty
    /// on first use).
    pub fn slot(&self, idx: usize) -> Option<Arc<Slot>> {
        let mut u = self.live.upstreams.lock().ok()?;
        Some(u.entry(idx).or_default().clone())
    }

    /// The session's backend slots, by backend index.
    pub fn slots(&self) -> Vec<(usize, Arc<Slot>)> {
        self.live
            .upstreams
            .lock()
            .map(|u| u.iter().map(|(i, s)| (*i, s.clone())).collect())
            .unwrap_or_default()
    }

    /// The session's live backend connections.
    pub fn connections(&self) -> Vec<Arc<Connection>> {
        self.slots()
            .iter()
            .filter_map(|(_, s)| s.current())
            .collect()
    }

    /// Takes the slot of backend `idx` out (the backend was removed).
    pub fn take_slot(&self, idx: usize) -> Option<Arc<Slot>> {
        self.live.upstreams.lock().ok()?.remove(&idx)
    }

    // --- the end --------------------------------------------------------------

    /// Whether the session ended.
    pub fn is_ended(&self) -> bool {
        self.live.closed.is_cancelled()
    }

    /// Resolves when the session ends.
    pub fn ended(&self) -> WaitForCancellationFuture<'_> {
        self.live.closed.cancelled()
    }

    /// Ends the session's streams and forgets its in-flight state; returns the
    /// per-session backend connections and the host calls that were in flight,
    /// which the caller closes and cancels.
    pub fn end(&self) -> (Vec<Arc<Slot>>, Vec<Arc<HostCall>>) {
        self.live.closed.cancel();
        self.live.events.close_all();
        if let Ok(mut m) = self.live.client_requests.lock() {
            m.clear();
        }
        let calls = match self.live.inflight.lock() {
            Ok(mut m) => m.drain().map(|(_, c)| c).collect(),
            Err(_) => Vec::new(),
        };
        let slots = match self.live.upstreams.lock() {
            Ok(mut u) => u.drain().map(|(_, s)| s).collect(),
            Err(_) => Vec::new(),
        };
        (slots, calls)
    }
}
