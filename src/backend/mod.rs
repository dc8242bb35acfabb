//! Client face: MCP client connections to backends over stdio and Streamable HTTP.

mod caller;
mod client;
mod conn;
pub(crate) mod events;
mod handshake;
mod http;
mod inbound;
mod listen;
pub(crate) mod modern;
mod slot;
mod sse;
mod stdio;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

pub(crate) use caller::Mirrored;
pub use caller::{Caller, UpstreamHandler};
pub use conn::{Connection, InitInfo, Owner};
pub use listen::watch_lists;
pub use slot::{Slot, backoff};
pub use upstream::{ListenGate, RecordedSession, Resume, SessionRecorder};

use self::modern::{Era, EraCache, Verdict};

use crate::auth::upstream::UpstreamCredentials;
use crate::config::{BackendConfig, BackendEra, Transport};
use crate::jsonrpc::{self, ErrorObject};
use crate::mcp::{Method, ProtocolVersion};

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

    /// A CLIENT span's `error.type` and JSON-RPC code for this failure.
    pub(crate) fn span_outcome(&self) -> (Option<String>, Option<i64>) {
        match self {
            BackendError::Rpc(e) => (Some(e.code.to_string()), Some(e.code)),
            BackendError::Timeout { .. } => (Some("timeout".into()), None),
            BackendError::Cancelled => (Some("cancelled".into()), None),
            BackendError::Busy { .. } => (Some("backend_busy".into()), None),
            BackendError::HttpStatus { status, .. } => (Some(status.to_string()), None),
            BackendError::Unavailable { .. } => (Some("unavailable".into()), None),
            BackendError::Protocol { .. } => (Some("protocol".into()), None),
        }
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
        mirrored: &Mirrored,
        bytes: Vec<u8>,
    ) -> Result<(), BackendError> {
        match self {
            Link::Stdio(l) => l.send(&conn.backend, bytes).await,
            Link::Http(l) => l.send_request(conn, id, method, mirrored, bytes).await,
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

    /// The OpenTelemetry `network.transport` of this link.
    fn network_transport(&self) -> &'static str {
        match self {
            Link::Stdio(_) => "pipe",
            Link::Http(_) | Link::Sse(_) => "tcp",
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
            Link::Http(l) => {
                l.close(conn).await;
                conn.release_get().await;
            }
            Link::Sse(l) => l.close(),
        }
    }

    /// [`Link::close`], except that a Streamable HTTP backend's session is not
    /// ended (no `DELETE`).
    async fn release(&self, conn: &Arc<Connection>) {
        match self {
            Link::Http(l) => {
                l.stop_listening();
                conn.release_get().await;
            }
            Link::Stdio(_) | Link::Sse(_) => self.close(conn).await,
        }
    }
}

/// A backend's per-call timeout, shared by its spec and every connection to it,
/// so a reload that changes `server.request_timeout` reaches calls on
/// connections already open. Nanoseconds (≈ 584 years at most).
#[derive(Debug)]
pub struct CallTimeout(std::sync::atomic::AtomicU64);

impl CallTimeout {
    fn new(d: Duration) -> Self {
        CallTimeout(std::sync::atomic::AtomicU64::new(nanos(d)))
    }

    /// The timeout in force.
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn set(&self, d: Duration) {
        self.0.store(nanos(d), std::sync::atomic::Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A configured backend: how to reach it and how long to wait for it.
pub struct BackendSpec {
    /// Backend name from the config.
    pub name: Arc<str>,
    /// Its config.
    pub config: BackendConfig,
    /// Per-call timeout: `timeout`, else `server.request_timeout` (followed at a
    /// reload, [`BackendSpec::set_default_timeout`]).
    timeout: Arc<CallTimeout>,
    /// reqwest: the legacy HTTP+SSE transport, and Streamable HTTP behind a proxy.
    http: Option<reqwest::Client>,
    /// The Streamable HTTP client ([`client::HttpClient`]).
    client: Option<client::HttpClient>,
    /// Set once an `http` backend turned out to speak only the legacy transport,
    /// so later connections skip the failing Streamable HTTP attempt.
    legacy_detected: std::sync::atomic::AtomicBool,
    /// The gateway's own credentials toward an HTTP backend (`auth` table).
    creds: Option<Arc<UpstreamCredentials>>,
    /// `era = "auto"`: what the last probe found (per backend: one origin, one
    /// command).
    era: Arc<EraCache>,
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
        let streamable = matches!(config.transport, Transport::Http { .. });
        let client = streamable.then(|| {
            client::HttpClient::new(proxy_configured(), || http.clone().unwrap_or_default())
        });
        let creds = config
            .upstream_auth
            .as_ref()
            .map(|a| UpstreamCredentials::new(name, a));
        BackendSpec {
            name: name.into(),
            creds,
            timeout: Arc::new(CallTimeout::new(config.timeout.unwrap_or(default_timeout))),
            config,
            http,
            client,
            legacy_detected: std::sync::atomic::AtomicBool::new(false),
            era: Arc::default(),
        }
    }

    /// The per-call timeout in force: `timeout`, else `server.request_timeout`.
    pub fn call_timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// Puts `server.request_timeout` in force for a backend without a `timeout`
    /// of its own (hot reload): calls started from now on, on every connection,
    /// use it.
    pub fn set_default_timeout(&self, default: Duration) {
        if self.config.timeout.is_none() {
            self.timeout.set(default);
        }
    }

    /// Whether a connection serves one call at a time: a stdio child not known
    /// to speak 2026-07-28 (its pipe cannot say whose server→client request it
    /// sends). An HTTP connection, or a 2026-07-28 child, serves many at once.
    pub fn one_call_at_a_time(&self) -> bool {
        matches!(self.config.transport, Transport::Stdio { .. })
            && !matches!(self.known_era(), Some(Era::Modern(_)))
    }

    /// The era spoken to the backend: configured, or cached from the last probe;
    /// `None`: probe (MCP 2026-07-28 basic/versioning, backward compatibility).
    fn known_era(&self) -> Option<Era> {
        match self.config.era {
            BackendEra::Legacy => Some(Era::Legacy),
            BackendEra::Modern => Some(Era::Modern(ProtocolVersion::MODERN)),
            BackendEra::Auto => self.era.get(),
        }
    }

    /// Opens a connection in the backend's era (probing it first for `auto`),
    /// declaring `capabilities` as the client's: `initialize` for a legacy
    /// backend, `server/discover` for a modern one. A connection that fails in
    /// a cached era forgets it, so the next attempt probes again.
    ///
    /// Errors: spawn or connect failures and handshake failures, as
    /// [`BackendError::Unavailable`] / [`BackendError::Protocol`]; an HTTP probe
    /// answered 401/403, 5xx or not at all fails as such (no era evidence).
    ///
    /// A legacy Streamable HTTP connection opens its GET stream only if
    /// `gate` lets it ([`ListenGate`]; `None`: always).
    pub async fn connect(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        gate: Option<Arc<dyn ListenGate>>,
    ) -> Result<Arc<Connection>, BackendError> {
        let outcome = match self.known_era() {
            None => return self.probe(owner, handler, capabilities, gate).await,
            Some(Era::Legacy) => (self.connect_legacy(owner, handler, capabilities, gate)).await,
            Some(Era::Modern(v)) => {
                let t = self.config.transport.clone();
                let start = Start::Modern(v);
                self.connect_as(t, owner, handler, capabilities, start, gate)
                    .await
            }
        };
        if outcome.is_err() && self.config.era == BackendEra::Auto {
            self.era.forget();
        }
        outcome
    }

    /// `era = "auto"` with nothing cached. HTTP: `server/discover` on the
    /// endpoint; a `DiscoverResult` naming our revision → modern; -32022 naming
    /// another modern one → once more at it; other errors, 4xx and garbage →
    /// legacy; 401/403, 5xx, resets and timeouts → the error (unavailable, with
    /// the slot's backoff). stdio: `server/discover` as the child's first
    /// request, then `initialize` on the same child when it is not modern, or on
    /// a fresh one when the probe made it exit.
    async fn probe(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        gate: Option<Arc<dyn ListenGate>>,
    ) -> Result<Arc<Connection>, BackendError> {
        let transport = self.config.transport.clone();
        let stdio = matches!(transport, Transport::Stdio { .. });
        let mut version = ProtocolVersion::MODERN;
        let mut retried = false;
        let failure = loop {
            let start = if stdio {
                Start::Probe(version)
            } else {
                Start::Modern(version)
            };
            let (o, h, c) = (owner.clone(), handler.clone(), capabilities.clone());
            let g = gate.clone();
            let e = match self.connect_as(transport.clone(), o, h, c, start, g).await {
                Ok(conn) => {
                    let era = conn.modern().map_or(Era::Legacy, Era::Modern);
                    self.era.set(era);
                    return Ok(conn);
                }
                Err(e) => e,
            };
            match modern::classify_probe_failure(&e, version) {
                Verdict::NoEvidence if !stdio => return Err(e),
                Verdict::Retry(v) if !retried => {
                    (version, retried) = (v, true);
                }
                _ => break e,
            }
        };
        tracing::info!(backend = %self.name, cause = %failure, "backend is not 2026-07-28; initializing");
        let legacy = self
            .connect_legacy(owner, handler, capabilities, gate)
            .await;
        if legacy.is_ok() {
            self.era.set(Era::Legacy);
        }
        legacy
    }

    /// Opens a legacy connection (`initialize`), falling back from Streamable
    /// HTTP to HTTP+SSE when `initialize` is refused.
    async fn connect_legacy(
        &self,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        gate: Option<Arc<dyn ListenGate>>,
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
                Start::Legacy,
                gate.clone(),
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
                let outcome = self
                    .connect_as(legacy, owner, handler, capabilities, Start::Legacy, gate)
                    .await;
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
        start: Start,
        gate: Option<Arc<dyn ListenGate>>,
    ) -> Result<Arc<Connection>, BackendError> {
        let modern = match start {
            Start::Legacy => None,
            Start::Modern(v) | Start::Probe(v) => Some(v),
        };
        let conn = Connection::new(
            self.name.clone(),
            owner,
            handler,
            capabilities,
            self.timeout.clone(),
            modern,
        );
        let conn = Arc::new(if self.config.era == BackendEra::Auto {
            conn.with_era_cache(self.era.clone())
        } else {
            conn
        });
        let reqwest = || self.http.clone().unwrap_or_default();
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
                let client =
                    (self.client.clone()).unwrap_or_else(|| client::HttpClient::Proxied(reqwest()));
                let mut link = http::HttpLink::new(&self.name, client, url, &headers)?;
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
                    sse::SseLink::open(&conn, reqwest(), url, &headers).await?,
                ))
            }
        };
        let _ = conn.link.set(link);
        if let Some(g) = gate {
            let _ = conn.listen_gate.set(g);
        }
        let fallback = matches!(start, Start::Probe(_));
        match conn.handshake(modern::PROBE_TIMEOUT, fallback).await {
            Ok(()) => {
                if conn.modern().is_none() {
                    // Servers may send requests and notifications on the GET stream
                    // right after `initialize` (and drop them while none is open):
                    // open it before the connection is used (bounded wait).
                    conn.open_get().await;
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

/// How a new connection starts.
#[derive(Clone, Copy)]
enum Start {
    /// `initialize`.
    Legacy,
    /// `server/discover` at this revision; its failure is the connection's.
    Modern(ProtocolVersion),
    /// `server/discover`, then `initialize` on the same transport if it fails
    /// while the transport lives (stdio `auto`).
    Probe(ProtocolVersion),
}
