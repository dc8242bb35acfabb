//! Client face: MCP client connections to backends over stdio and Streamable HTTP.

mod conn;
pub(crate) mod events;
mod http;
mod sse;
mod stdio;

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

pub use conn::{Connection, InitInfo, Owner};

use crate::auth::upstream::UpstreamCredentials;
use crate::config::{BackendConfig, Transport};
use crate::jsonrpc::{self, ErrorObject, Notification, Request};
use crate::mcp::Method;

/// How long a new HTTP connection waits for its standalone GET stream to open.
const GET_STREAM_WAIT: Duration = Duration::from_secs(1);

/// Why a call to a backend failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    /// The backend answered with a JSON-RPC error; it is passed on unchanged.
    #[error("backend error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// No answer within the per-call timeout.
    #[error("backend {backend:?} did not answer within {after:?}")]
    Timeout {
        /// Backend name.
        backend: String,
        /// The timeout that fired.
        after: Duration,
    },
    /// The gateway's own limit for this backend refused the call
    /// (`max_concurrency` with `queue_timeout`, `max_connections`).
    #[error("backend {backend:?} is unavailable: busy: {reason}")]
    Busy {
        /// Backend name.
        backend: String,
        /// Which limit.
        reason: String,
    },
    /// The backend cannot be reached: not started, exited, connection refused.
    #[error("backend {backend:?} is unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// What happened.
        reason: String,
    },
    /// The backend sent something that breaks MCP or JSON-RPC.
    #[error("backend {backend:?} broke the protocol: {reason}")]
    Protocol {
        /// Backend name.
        backend: String,
        /// What it sent.
        reason: String,
    },
    /// An HTTP backend answered with an unexpected status.
    #[error("backend {backend:?} answered HTTP {status}")]
    HttpStatus {
        /// Backend name.
        backend: String,
        /// The status code.
        status: u16,
    },
    /// The request was cancelled by the host; no answer is due.
    #[error("request cancelled")]
    Cancelled,
}

impl BackendError {
    pub(crate) fn closed(backend: &str, reason: impl Into<String>) -> Self {
        BackendError::Unavailable {
            backend: backend.to_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn protocol(backend: &str, reason: impl Into<String>) -> Self {
        BackendError::Protocol {
            backend: backend.to_owned(),
            reason: reason.into(),
        }
    }

    /// The JSON-RPC error the host receives. Backend errors pass through unchanged;
    /// gateway-side failures are `-32603` with `data.backend` naming the backend.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            BackendError::Rpc(e) => e.clone(),
            BackendError::Timeout { backend, .. }
            | BackendError::Busy { backend, .. }
            | BackendError::Unavailable { backend, .. }
            | BackendError::Protocol { backend, .. }
            | BackendError::HttpStatus { backend, .. } => {
                ErrorObject::new(jsonrpc::INTERNAL_ERROR, self.to_string())
                    .with_data(json!({"backend": backend}))
            }
            BackendError::Cancelled => {
                ErrorObject::new(jsonrpc::INTERNAL_ERROR, "request cancelled")
            }
        }
    }
}

/// The caller of one upstream request, opaque to the client face (for the
/// gateway: the host request being served). The connection asks it what it needs
/// to send the request, and hands it back to the [`UpstreamHandler`] with every
/// message the backend relates to that request.
pub trait Caller: Send + Sync + 'static {
    /// Whether the request asks for progress: the upstream request then carries
    /// its upstream id as progress token (MCP basic/utilities/progress).
    fn wants_progress(&self) -> bool;
    /// The request became upstream request `id` on `conn` (it is pending from now
    /// on, so a cancel finds it). `false`: the caller gave up meanwhile, and the
    /// request is not sent.
    fn started(&self, conn: &Arc<Connection>, id: u64) -> bool;
    /// The caller as `Any`, so the handler that created it can downcast it.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Receives what backends send on their own initiative, and answers what the
/// client face must ask about a connection's owner. Implemented by the layer that
/// gave the connection its [`Owner`] (the gateway's relay).
///
/// `call` is the request the message relates to, when the connection could tell
/// (progress token, the HTTP stream it came on, or the only request with a caller
/// in flight: on an exclusive connection for anything, on a shared one only for
/// server→client requests and `notifications/message`).
pub trait UpstreamHandler: Send + Sync + 'static {
    /// A notification from the backend.
    fn on_notification(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<dyn Caller>>,
        n: Notification,
    );
    /// A request from the backend; answer it with [`Connection::respond`].
    fn on_request(&self, conn: &Arc<Connection>, call: Option<Arc<dyn Caller>>, r: Request);
    /// The connection closed (process exit, transport failure or [`Connection::close`]).
    fn on_closed(&self, conn: &Arc<Connection>);
    /// The access token of the client that owns `conn` (exclusive connections),
    /// for credentials exchanged for it (RFC 8693). `None` by default.
    fn subject_token(&self, conn: &Connection) -> Option<Arc<str>> {
        let _ = conn;
        None
    }
}

/// The transport under a [`Connection`].
pub(crate) enum Link {
    Stdio(stdio::StdioLink),
    Http(Box<http::HttpLink>),
    Sse(Box<sse::SseLink>),
}

impl Link {
    /// Sends request `id`. For HTTP this also reads the whole response (JSON body or
    /// SSE stream) and dispatches every message in it.
    async fn send_request(
        &self,
        conn: &Arc<Connection>,
        id: u64,
        method: &Method,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        match self {
            Link::Stdio(l) => l.send(&conn.backend, bytes).await,
            Link::Http(l) => l.send_request(conn, id, method, bytes).await,
            Link::Sse(l) => l.send(bytes).await,
        }
    }

    /// Sends a notification or a response without waiting.
    fn send_detached(&self, conn: &Arc<Connection>, bytes: Vec<u8>) {
        match self {
            Link::Stdio(l) => l.send_detached(bytes),
            Link::Http(l) => l.send_detached(conn, bytes),
            Link::Sse(l) => l.send_detached(bytes),
        }
    }

    /// Sends a notification and waits until the transport took it (HTTP: 2xx).
    async fn send_awaited(
        &self,
        conn: &Arc<Connection>,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        match self {
            Link::Stdio(l) => l.send(&conn.backend, bytes).await,
            Link::Http(l) => l.send_awaited(conn, bytes).await,
            Link::Sse(l) => l.send(bytes).await,
        }
    }

    /// The backend's `Mcp-Session-Id` (Streamable HTTP only).
    fn session_id(&self) -> Option<String> {
        match self {
            Link::Http(l) => l.session_id(),
            Link::Stdio(_) | Link::Sse(_) => None,
        }
    }

    async fn close(&self, conn: &Arc<Connection>) {
        match self {
            Link::Stdio(l) => l.close(&conn.backend).await,
            Link::Http(l) => l.close(conn).await,
            Link::Sse(l) => l.close(),
        }
    }

    /// [`Link::close`], except that a Streamable HTTP backend's session is not
    /// ended (no `DELETE`).
    async fn release(&self, conn: &Arc<Connection>) {
        match self {
            Link::Http(l) => l.stop_listening(),
            Link::Stdio(_) | Link::Sse(_) => self.close(conn).await,
        }
    }
}

/// A configured backend: how to reach it and how long to wait for it.
pub struct BackendSpec {
    /// Backend name from the config.
    pub name: Arc<str>,
    /// Its config.
    pub config: BackendConfig,
    /// Per-call timeout.
    pub timeout: Duration,
    http: Option<reqwest::Client>,
    /// Set once an `http` backend turned out to speak only the legacy transport,
    /// so later connections skip the failing Streamable HTTP attempt.
    legacy_detected: std::sync::atomic::AtomicBool,
    /// The gateway's own credentials toward an HTTP backend (`auth` table).
    creds: Option<Arc<UpstreamCredentials>>,
}

/// Whether the environment names an HTTP proxy (the variables reqwest reads).
fn proxy_configured() -> bool {
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"].iter().any(|v| {
        std::env::var_os(v).is_some() || std::env::var_os(v.to_ascii_lowercase()).is_some()
    })
}

impl BackendSpec {
    /// Builds the spec (and, for HTTP backends, one pooled HTTP client).
    pub fn new(name: &str, config: BackendConfig, default_timeout: Duration) -> Self {
        let http = match &config.transport {
            Transport::Http { .. } | Transport::Sse { .. } => {
                let mut builder = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .pool_max_idle_per_host(64);
                if !proxy_configured() {
                    // reqwest asks its proxy matcher about every request, which parses
                    // the URL again (url + IDNA: 2.4% of the gateway's CPU per call,
                    // perf, http_echo C=16); with no proxy variables it answers "none".
                    builder = builder.no_proxy();
                }
                builder.build().ok()
            }
            Transport::Stdio { .. } => None,
        };
        let creds = config
            .upstream_auth
            .as_ref()
            .map(|a| UpstreamCredentials::new(name, a));
        BackendSpec {
            name: name.into(),
            creds,
            timeout: config.timeout.unwrap_or(default_timeout),
            config,
            http,
            legacy_detected: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Opens a connection and performs the initialize handshake, declaring
    /// `capabilities` as the client's.
    ///
    /// Errors: spawn or connect failures and handshake failures, as
    /// [`BackendError::Unavailable`] / [`BackendError::Protocol`].
    pub async fn connect(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
    ) -> Result<Arc<Connection>, BackendError> {
        use std::sync::atomic::Ordering;
        let transport = match &self.config.transport {
            Transport::Http { url, headers } if self.legacy_detected.load(Ordering::Relaxed) => {
                Transport::Sse {
                    url: url.clone(),
                    headers: headers.clone(),
                }
            }
            t => t.clone(),
        };
        let first = self
            .connect_as(
                transport.clone(),
                owner.clone(),
                handler.clone(),
                capabilities.clone(),
            )
            .await;
        match (&transport, first) {
            // MCP 2025-11-25 transports, backwards compatibility: a POST of
            // `initialize` answered 400, 404 or 405 means an HTTP+SSE server.
            (
                Transport::Http { url, headers },
                Err(BackendError::HttpStatus {
                    status: 400 | 404 | 405,
                    ..
                }),
            ) => {
                tracing::info!(backend = %self.name, "Streamable HTTP refused; trying the legacy HTTP+SSE transport");
                let legacy = Transport::Sse {
                    url: url.clone(),
                    headers: headers.clone(),
                };
                let outcome = self.connect_as(legacy, owner, handler, capabilities).await;
                if outcome.is_ok() {
                    self.legacy_detected.store(true, Ordering::Relaxed);
                }
                outcome
            }
            (_, outcome) => outcome,
        }
    }

    async fn connect_as(
        &self,
        transport: Transport,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
    ) -> Result<Arc<Connection>, BackendError> {
        let conn = Arc::new(Connection::new(
            self.name.clone(),
            owner,
            handler,
            capabilities,
            self.timeout,
        ));
        let client = || self.http.clone().unwrap_or_default();
        let link = match &transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Link::Stdio(stdio::StdioLink::spawn(
                &conn,
                command,
                args,
                env,
                cwd.as_deref(),
            )?),
            Transport::Http { url, headers } => {
                let headers = http::with_headers_file(
                    &self.name,
                    headers,
                    self.config.headers_file.as_deref(),
                )?;
                let mut link = http::HttpLink::new(&self.name, client(), url, &headers)?;
                link.creds = self.creds.clone();
                Link::Http(Box::new(link))
            }
            Transport::Sse { url, headers } => {
                let headers = http::with_headers_file(
                    &self.name,
                    headers,
                    self.config.headers_file.as_deref(),
                )?;
                Link::Sse(Box::new(
                    sse::SseLink::open(&conn, client(), url, &headers).await?,
                ))
            }
        };
        let _ = conn.link.set(link);
        match conn.handshake().await {
            Ok(()) => {
                if let Some(Link::Http(l)) = conn.link.get() {
                    // Servers may send requests and notifications on the GET stream
                    // right after `initialize` (and drop them while none is open):
                    // open it before the connection is used (bounded wait).
                    let answered = l.start_listening(&conn);
                    let _ = tokio::time::timeout(GET_STREAM_WAIT, answered).await;
                }
                Ok(conn)
            }
            Err(e) => {
                conn.close().await;
                Err(e)
            }
        }
    }
}

/// Reconnect delay after `failures` consecutive failures: 0.5 s doubling to 30 s,
/// with ±20 % jitter so replicas do not retry in lockstep.
pub fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(500).saturating_mul(1 << failures.min(6).saturating_sub(1));
    let base = base.min(Duration::from_secs(30));
    let mut b = [0u8; 1];
    let _ = getrandom::fill(&mut b);
    let factor = 0.8 + 0.4 * f64::from(b[0]) / 255.0;
    base.mul_f64(factor)
}

/// Holds at most one live connection and (re)connects on demand, with exponential
/// backoff after failures so a broken backend is not hammered.
pub struct Slot {
    current: Mutex<Option<Arc<Connection>>>,
    connecting: tokio::sync::Mutex<Backoff>,
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<BackendError>,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(Backoff::default()),
        }
    }
}

impl Slot {
    /// The live connection, if any, without connecting.
    pub fn current(&self) -> Option<Arc<Connection>> {
        let c = self.current.lock().ok()?.clone()?;
        c.is_alive().then_some(c)
    }

    /// The live connection, connecting first if needed. While in backoff after a
    /// failure, fails at once with the last error.
    pub async fn get(
        &self,
        spec: &BackendSpec,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
    ) -> Result<Arc<Connection>, BackendError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let mut backoff = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if let (Some(at), Some(e)) = (backoff.retry_at, &backoff.last_error)
            && Instant::now() < at
        {
            return Err(e.clone());
        }
        match spec.connect(owner, handler, capabilities).await {
            Ok(c) => {
                *backoff = Backoff::default();
                if let Ok(mut cur) = self.current.lock() {
                    *cur = Some(c.clone());
                }
                Ok(c)
            }
            Err(e) => {
                backoff.failures = backoff.failures.saturating_add(1);
                let secs = 1u64 << backoff.failures.min(5);
                backoff.retry_at = Some(Instant::now() + Duration::from_millis(secs * 250));
                backoff.last_error = Some(e.clone());
                tracing::warn!(backend = %spec.name, cause = %e, failures = backoff.failures, "cannot connect to backend");
                Err(e)
            }
        }
    }

    /// Takes the connection out of the slot (for closing).
    pub fn take(&self) -> Option<Arc<Connection>> {
        self.current.lock().ok()?.take()
    }
}
