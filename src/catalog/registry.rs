//! The backend registry: runtime state of every configured backend, with stable
//! indices. Backends added by a reload are appended; removed ones are marked and
//! stay in place, so an index held by a view, a session or a subscription never
//! points at another backend.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::curation::ToolFilterSet;
use super::fetch::BackendCatalog;
use super::health::BackendHealth;
use crate::auth::ClientKey;
use crate::backend::{BackendError, BackendSpec, Connection, Slot};
use crate::config::{BackendConfig, ConnectionMode, ToolOverride, uri_prefix};

/// Runtime state of one configured backend.
pub struct BackendState {
    /// Position in the registry (stable for the gateway's lifetime).
    pub index: usize,
    /// How to reach it.
    pub spec: BackendSpec,
    /// Tool/prompt name prefix (`""` = unprefixed).
    pub prefix: String,
    /// Resource URI prefix (`""` = unprefixed).
    pub uri_prefix: String,
    /// Connection mode.
    pub mode: ConnectionMode,
    pub(super) tools: ToolFilterSet,
    /// The shared connection (shared mode) or the catalogue connection.
    shared: Slot,
    catalog: Mutex<Option<Arc<BackendCatalog>>>,
    refreshing: tokio::sync::Mutex<()>,
    refresh_scheduled: AtomicBool,
    /// Concurrency limit (`max_concurrency`), if configured.
    permits: Option<Arc<tokio::sync::Semaphore>>,
    /// Set when a reload removed (or replaced) this backend.
    removed: AtomicBool,
    /// Set for backends added by a reload: their first catalogue is news to the
    /// sessions already running, so it is announced with `list_changed`.
    late: AtomicBool,
    /// Per-session and pooled connections open or opening, in all and by client
    /// (bounded by `max_connections` and `max_connections_per_client`).
    open: Mutex<OpenCounts>,
    /// When the backend first sent, on its shared connection, what only one host
    /// can use (a server→client request, or a log no single call was in flight
    /// for): it keeps state per client.
    stateful_since: OnceLock<tokio::time::Instant>,
    /// Set once the first unroutable message was reported (logged once).
    unroutable_reported: AtomicBool,
    /// The shared (or catalogue) connection's history, as the supervisor saw it.
    pub health: BackendHealth,
}

impl BackendState {
    /// The runtime state for backend `name` at registry position `index`.
    pub fn new(
        index: usize,
        name: &str,
        b: &BackendConfig,
        default_timeout: std::time::Duration,
    ) -> Self {
        let prefix = b.prefix(name).to_owned();
        BackendState {
            index,
            uri_prefix: uri_prefix(&prefix),
            prefix,
            mode: b.mode(),
            tools: ToolFilterSet::new(&b.tools.include, &b.tools.exclude)
                .with_overrides(&b.tools.overrides),
            spec: BackendSpec::new(name, b.clone(), default_timeout),
            shared: Slot::default(),
            catalog: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            refresh_scheduled: AtomicBool::new(false),
            permits: b
                .max_concurrency
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
            removed: AtomicBool::new(false),
            late: AtomicBool::new(false),
            open: Mutex::default(),
            stateful_since: OnceLock::new(),
            unroutable_reported: AtomicBool::new(false),
            health: BackendHealth::default(),
        }
    }

    /// Whether a reload removed this backend.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Marks the backend removed and forgets its catalogue.
    pub fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
        if let Ok(mut c) = self.catalog.lock() {
            *c = None;
        }
    }

    /// Waits for a free call slot when `max_concurrency` is set; fails with
    /// "busy" after `queue_timeout`.
    pub async fn acquire(&self) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, BackendError> {
        let Some(sem) = &self.permits else {
            return Ok(None);
        };
        match tokio::time::timeout(self.spec.config.queue_timeout, sem.clone().acquire_owned())
            .await
        {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(BackendError::Busy {
                backend: self.spec.name.to_string(),
                reason: format!(
                    "{} calls in flight, none finished within {:?}",
                    self.spec.config.max_concurrency.unwrap_or_default(),
                    self.spec.config.queue_timeout
                ),
            }),
        }
    }

    /// Whether the shared (or catalogue) connection is up.
    pub fn is_up(&self) -> bool {
        self.shared.current().is_some()
    }

    /// The backend's catalogue, if fetched.
    pub fn catalog(&self) -> Option<Arc<BackendCatalog>> {
        self.catalog.lock().ok()?.clone()
    }

    pub(super) fn set_catalog(&self, c: Option<Arc<BackendCatalog>>) {
        if let Ok(mut cur) = self.catalog.lock() {
            *cur = c;
        }
    }

    /// Whether the backend declared server capability `name` (`false` until its
    /// catalogue was fetched).
    pub fn has_capability(&self, name: &str) -> bool {
        self.catalog().is_some_and(|c| c.init.has(name))
    }

    /// The shared connection (shared mode), or the catalogue connection
    /// (per-session mode: the gateway's own, for lists and health).
    pub fn shared(&self) -> &Slot {
        &self.shared
    }

    /// Held while the backend's lists are fetched: one refresh at a time.
    pub async fn refreshing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.refreshing.lock().await
    }

    /// Marks a refresh as scheduled; `false` if one already is (bursts of
    /// `list_changed` coalesce into one refresh).
    pub fn schedule_refresh(&self) -> bool {
        !self.refresh_scheduled.swap(true, Ordering::AcqRel)
    }

    /// The scheduled refresh starts: later `list_changed` schedule a new one.
    pub fn refresh_started(&self) {
        self.refresh_scheduled.store(false, Ordering::Release);
    }

    /// Whether a reload added this backend (its first lists are news to the
    /// sessions already running).
    pub fn is_late(&self) -> bool {
        self.late.load(Ordering::Acquire)
    }

    /// Marks the backend as added by a reload.
    pub fn mark_late(&self) {
        self.late.store(true, Ordering::Release);
    }

    /// The curated form of tool `original`, if configured.
    pub fn tool_override(&self, original: &str) -> Option<&ToolOverride> {
        self.tools.override_for(original)
    }

    /// Records that the backend showed it keeps state per client; `true` the first
    /// time.
    pub fn note_stateful(&self) -> bool {
        self.stateful_since.set(tokio::time::Instant::now()).is_ok()
    }

    /// When the backend first showed it keeps state per client, if it did.
    pub fn stateful_since(&self) -> Option<tokio::time::Instant> {
        self.stateful_since.get().copied()
    }

    /// Whether a session created at `session_created` uses the backend's shared
    /// connection: always in `shared` mode, never in `per_session` mode, and in
    /// `auto` mode unless the backend had shown it keeps state per client before
    /// the session was created (a session never changes connection kind).
    pub fn shares_with(&self, session_created: tokio::time::Instant) -> bool {
        match self.mode {
            ConnectionMode::Shared => true,
            ConnectionMode::PerSession => false,
            ConnectionMode::Auto => self
                .stateful_since()
                .is_none_or(|since| session_created < since),
        }
    }

    /// Records an unroutable message on the shared connection; `true` the first
    /// time (it is logged once).
    pub fn note_unroutable(&self) -> bool {
        !self.unroutable_reported.swap(true, Ordering::AcqRel)
    }

    /// Counts a connection about to open for `client` against `max_connections`
    /// and the client's `max_connections_per_client` (`None`: an unknown
    /// client, counted in the total only). The ticket keeps it counted: hand
    /// it to [`BackendState::count_connection`] once the connection is open;
    /// dropping it (the attempt failed) uncounts it.
    ///
    /// Errors: [`BackendError::Busy`] with which limit refused it.
    pub fn reserve_connection(
        self: &Arc<Self>,
        client: Option<&ClientKey>,
    ) -> Result<ConnectionTicket, ConnectionRefusal> {
        let config = &self.spec.config;
        let busy = |reason: String| BackendError::Busy {
            backend: self.spec.name.to_string(),
            reason,
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.total >= config.max_connections {
            let limit = config.max_connections;
            return Err(ConnectionRefusal::Backend(busy(format!(
                "{limit} connections are open (sessions' own and the stateless pool's; max_connections); retry when sessions end or idle out"
            ))));
        }
        if let Some(c) = client {
            let limit = config.max_connections_per_client;
            let held = open.by_client.entry(c.clone()).or_default();
            if *held >= limit {
                return Err(ConnectionRefusal::Client(busy(format!(
                    "this client already holds {limit} connections to it (max_connections_per_client); end sessions it no longer uses (DELETE) or wait until they idle out"
                ))));
            }
            *held += 1;
        }
        open.total += 1;
        Ok(ConnectionTicket {
            backend: self.clone(),
            client: client.cloned(),
        })
    }

    /// Keeps `ticket` (the connection counted) until `conn` closes.
    pub fn count_connection(conn: &Arc<Connection>, ticket: ConnectionTicket) {
        let closed = conn.closed.clone();
        tokio::spawn(async move {
            closed.cancelled().await;
            drop(ticket);
        });
    }
}

/// Connections of a per-session backend open or opening.
#[derive(Default)]
struct OpenCounts {
    total: usize,
    by_client: std::collections::HashMap<ClientKey, usize>,
}

/// One connection counted by [`BackendState::reserve_connection`]; uncounted
/// when dropped.
pub struct ConnectionTicket {
    backend: Arc<BackendState>,
    client: Option<ClientKey>,
}

impl Drop for ConnectionTicket {
    fn drop(&mut self) {
        let mut open = self.backend.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(c) = &self.client
            && let Some(held) = open.by_client.get_mut(c)
        {
            *held = held.saturating_sub(1);
            if *held == 0 {
                open.by_client.remove(c);
            }
        }
    }
}

/// Why a per-session backend's connection was not opened for a call: the
/// backend's `max_connections` or the client's `max_connections_per_client`
/// ([`BackendState::reserve_connection`]), or the pool's wait.
#[derive(Debug)]
pub enum ConnectionRefusal {
    /// The backend is at `max_connections`.
    Backend(BackendError),
    /// The client is at `max_connections_per_client`.
    Client(BackendError),
    /// No pooled connection was ready or free in time (`queue_timeout`).
    Pool(BackendError),
}

impl ConnectionRefusal {
    /// The metric label of the limit (`max_connections`, `per_client`,
    /// `pool_wait`).
    pub fn reason(&self) -> &'static str {
        match self {
            ConnectionRefusal::Backend(_) => "max_connections",
            ConnectionRefusal::Client(_) => "per_client",
            ConnectionRefusal::Pool(_) => "pool_wait",
        }
    }

    /// The error the call gets.
    pub fn into_error(self) -> BackendError {
        match self {
            ConnectionRefusal::Backend(e)
            | ConnectionRefusal::Client(e)
            | ConnectionRefusal::Pool(e) => e,
        }
    }
}

/// Every backend the gateway has known, by stable index.
#[derive(Default)]
pub struct Backends {
    list: RwLock<Arc<Vec<Arc<BackendState>>>>,
}

impl Backends {
    /// The backend at `index`. Indices come only from this registry, which never
    /// shrinks, so every index handed out stays valid.
    pub fn at(&self, index: usize) -> Arc<BackendState> {
        self.snapshot()[index].clone()
    }

    /// All backends, removed ones included (check [`BackendState::is_removed`]).
    pub fn snapshot(&self) -> Arc<Vec<Arc<BackendState>>> {
        self.list
            .read()
            .map(|l| l.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Backends in service.
    pub fn active(&self) -> Vec<Arc<BackendState>> {
        self.snapshot()
            .iter()
            .filter(|b| !b.is_removed())
            .cloned()
            .collect()
    }

    /// The backend in service named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<BackendState>> {
        self.snapshot()
            .iter()
            .rev()
            .find(|b| !b.is_removed() && *b.spec.name == *name)
            .cloned()
    }

    /// Appends a backend built by `make` from its index.
    pub fn push(&self, make: impl FnOnce(usize) -> BackendState) -> Arc<BackendState> {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        let b = Arc::new(make(l.len()));
        let mut next = Vec::clone(&l);
        next.push(b.clone());
        *l = Arc::new(next);
        b
    }
}

/// The view inputs for `backends` (the whole registry, so view indices are
/// registry indices). Removed backends contribute nothing.
pub(super) fn view_inputs<'a>(
    backends: &'a [Arc<BackendState>],
    catalogs: &'a [Option<Arc<BackendCatalog>>],
) -> Vec<super::view::ViewInput<'a>> {
    backends
        .iter()
        .map(|b| {
            let live = !b.is_removed();
            super::view::ViewInput {
                name: &b.spec.name,
                prefix: if live { &b.prefix } else { "" },
                uri_prefix: if live { &b.uri_prefix } else { "" },
                tools: &b.tools,
                catalog: if live {
                    catalogs.get(b.index).and_then(|c| c.as_deref())
                } else {
                    None
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::Config;

    fn backend(extra: &str) -> Arc<BackendState> {
        let text = format!(
            "[backends.ps]\ntype = \"stdio\"\ncommand = \"x\"\nmode = \"per_session\"\n{extra}"
        );
        let config = Config::parse(&text, Path::new("t.toml"), &|_| None).expect("valid");
        let b = &config.backends["ps"];
        Arc::new(BackendState::new(0, "ps", b, Duration::from_secs(5)))
    }

    fn at(last: u8) -> ClientKey {
        ClientKey::Address(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last)))
    }

    #[test]
    fn a_clients_share_is_a_quarter_of_max_connections_by_default() {
        let b = backend("max_connections = 8");
        let (one, two) = (at(1), at(2));
        let held: Vec<_> = (0..2)
            .map(|_| b.reserve_connection(Some(&one)).expect("within its share"))
            .collect();
        let refused = b.reserve_connection(Some(&one)).err().expect("over 8/4");
        assert_eq!(refused.reason(), "per_client");
        assert!(
            refused
                .into_error()
                .to_string()
                .contains("max_connections_per_client")
        );
        let other = b.reserve_connection(Some(&two)).expect("another client");
        drop(held);
        assert!(
            b.reserve_connection(Some(&one)).is_ok(),
            "a dropped ticket frees"
        );
        drop(other);
    }

    #[test]
    fn the_backends_budget_bounds_every_client_together() {
        let b = backend("max_connections = 2\nmax_connections_per_client = 2");
        let _a = b.reserve_connection(Some(&at(1))).expect("first");
        let _b = b
            .reserve_connection(None)
            .expect("an unknown client counts in the total");
        let refused = b
            .reserve_connection(Some(&at(3)))
            .err()
            .expect("at max_connections");
        assert_eq!(refused.reason(), "max_connections");
    }
}
