//! The backend registry: runtime state of every configured backend, with stable
//! indices. Backends added by a reload are appended; removed ones are marked and
//! stay in place, so an index held by a view, a session or a subscription never
//! points at another backend.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::catalog::BackendCatalog;
use super::curation::ToolFilterSet;
use crate::backend::{BackendError, BackendSpec, Slot};
use crate::config::{BackendConfig, ConnectionMode, uri_prefix};

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
    pub(super) shared: Slot,
    pub(super) catalog: Mutex<Option<Arc<BackendCatalog>>>,
    pub(super) refreshing: tokio::sync::Mutex<()>,
    pub(super) refresh_scheduled: AtomicBool,
    /// Concurrency limit (`max_concurrency`), if configured.
    permits: Option<Arc<tokio::sync::Semaphore>>,
    /// Set when a reload removed (or replaced) this backend.
    removed: AtomicBool,
    /// Set for backends added by a reload: their first catalogue is news to the
    /// sessions already running, so it is announced with `list_changed`.
    pub(super) late: AtomicBool,
    /// Open per-session connections (bounded by `max_connections`).
    pub(super) per_session_open: std::sync::atomic::AtomicUsize,
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
            per_session_open: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Whether a reload removed this backend.
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Marks the backend removed and forgets its catalogue.
    pub(super) fn mark_removed(&self) {
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
            _ => Err(BackendError::Unavailable {
                backend: self.spec.name.to_string(),
                reason: format!(
                    "busy: {} calls in flight, none finished within {:?}",
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
pub fn view_inputs<'a>(
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
