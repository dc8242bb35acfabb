//! The catalogue: every configured backend ([`Backends`], stable indices), what
//! each one serves ([`BackendCatalog`]), and the aggregated [`View`] hosts see —
//! namespaced names, the reversible name table, URI routing, pre-serialized pages
//! with sealed cursors — plus one filtered view per authorization policy key.
//!
//! The catalogue never talks to a backend itself: the supervisor fetches a
//! backend's lists and [`Catalog::install`]s them here.

mod access;
mod curation;
pub(crate) mod cursor;
mod fetch;
mod pages;
mod registry;
mod view;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub use curation::inject as inject_overrides;
pub use fetch::{BackendCatalog, fetch};
pub use registry::{BackendState, Backends};
pub use view::View;

use crate::cluster::Sealer;
use crate::config::Config;
use crate::mcp::Changed;
use cursor::CursorKey;

/// The catalogue; see the module docs.
pub struct Catalog {
    backends: Backends,
    view: RwLock<Arc<View>>,
    /// Counts rebuilds: orders the snapshots per-key views are built from (the
    /// views' own epochs are content digests, which have no order).
    generation: AtomicU64,
    key: CursorKey,
    access: access::Access,
    page_size: usize,
    max_name_len: usize,
}

impl Catalog {
    /// The catalogue of `config`'s backends, with nothing fetched yet; cursors
    /// are sealed by `sealer`.
    pub fn new(config: &Config, sealer: Arc<Sealer>) -> Catalog {
        let backends = Backends::default();
        for (name, b) in &config.backends {
            backends.push(|index| BackendState::new(index, name, b, config.server.request_timeout));
        }
        let key = CursorKey::new(sealer);
        let (page_size, max_name_len) = (config.server.page_size, config.server.max_name_len);
        let view = View::build(&[], page_size, max_name_len, key.clone());
        Catalog {
            backends,
            view: RwLock::new(Arc::new(view)),
            generation: AtomicU64::new(0),
            key,
            access: access::Access::new(&config.policy),
            page_size,
            max_name_len,
        }
    }

    /// The backend registry.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// The backend at registry index `idx`.
    pub fn backend(&self, idx: usize) -> Arc<BackendState> {
        self.backends.at(idx)
    }

    /// The current aggregated view (everything, before any policy).
    pub fn view(&self) -> Arc<View> {
        self.view
            .read()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Stores backend `idx`'s freshly fetched lists and rebuilds the view if they
    /// changed. Returns which of the three `list_changed` lists changed.
    pub fn install(&self, idx: usize, fresh: BackendCatalog) -> Vec<Changed> {
        let b = self.backends.at(idx);
        let old = b.catalog();
        let changed: Vec<Changed> = Changed::ALL
            .into_iter()
            .filter(|c| {
                let Some(o) = old.as_ref() else { return true };
                match c {
                    Changed::Tools => o.tools != fresh.tools,
                    Changed::Prompts => o.prompts != fresh.prompts,
                    Changed::Resources => {
                        o.resources != fresh.resources || o.templates != fresh.templates
                    }
                }
            })
            .collect();
        b.set_catalog(Some(Arc::new(fresh)));
        if !changed.is_empty() {
            self.rebuild();
        }
        changed
    }

    /// Rebuilds the aggregated view from every backend's current lists.
    pub fn rebuild(&self) {
        // Held from reading the catalogues to publishing the view: concurrent
        // rebuilds (backends loading at start) must not let an older build, which
        // missed a catalogue set meanwhile, overwrite a newer one.
        let mut current = self.view.write().unwrap_or_else(|e| e.into_inner());
        let backends = self.backends.snapshot();
        let catalogs: Vec<Option<Arc<BackendCatalog>>> =
            backends.iter().map(|b| b.catalog()).collect();
        let inputs = registry::view_inputs(&backends, &catalogs);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let view = View::build(&inputs, self.page_size, self.max_name_len, self.key.clone());
        self.access.record(generation, catalogs.clone());
        *current = Arc::new(view);
    }
}
