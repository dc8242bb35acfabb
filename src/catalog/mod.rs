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
mod describe;
mod fetch;
mod health;
mod own;
mod pages;
mod registry;
mod view;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

pub use curation::inject as inject_overrides;
pub use describe::describe;
pub use fetch::{BackendCatalog, fetch};
pub use registry::{BackendState, Backends, ConnectionRefusal, ConnectionTicket};
pub use view::View;

use crate::cluster::Sealer;
use crate::config::Config;
use crate::mcp::Changed;
use cursor::CursorKey;

/// Whether two lists hold the same items, in any order (objects compare by
/// content; key order never matters).
fn same_items(a: &[serde_json::Value], b: &[serde_json::Value]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a == b {
        return true;
    }
    let sorted = |l: &[serde_json::Value]| {
        let mut v: Vec<String> = l.iter().map(canonical).collect();
        v.sort_unstable();
        v
    };
    sorted(a) == sorted(b)
}

/// Which of the three `list_changed` lists differ between `old` (all of them
/// when there is none) and `fresh`.
fn changed_lists(old: Option<&BackendCatalog>, fresh: &BackendCatalog) -> Vec<Changed> {
    Changed::ALL
        .into_iter()
        .filter(|c| {
            let Some(o) = old else { return true };
            match c {
                Changed::Tools => !same_items(&o.tools, &fresh.tools),
                Changed::Prompts => !same_items(&o.prompts, &fresh.prompts),
                Changed::Resources => {
                    !same_items(&o.resources, &fresh.resources)
                        || !same_items(&o.templates, &fresh.templates)
                }
            }
        })
        .collect()
}

/// `v` serialized with object keys sorted, so equal values serialize equally.
fn canonical(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// The catalogue; see the module docs.
pub struct Catalog {
    backends: Backends,
    view: RwLock<Arc<View>>,
    /// Counts rebuilds: orders the snapshots per-key views are built from (the
    /// views' own epochs are content digests, which have no order).
    generation: AtomicU64,
    key: CursorKey,
    access: access::Access,
    /// `server.page_size` and `server.max_name_len` (a reload may change them:
    /// [`Catalog::set_paging`]).
    page_size: AtomicUsize,
    max_name_len: AtomicUsize,
    /// Per-session backends' own lists, per session (`own.rs`), and how many
    /// sessions have some (0: nothing to look up).
    own: own::OwnLists,
    own_sessions: AtomicUsize,
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
            access: access::Access::new(&config.policy, &config.endpoints),
            page_size: AtomicUsize::new(page_size),
            max_name_len: AtomicUsize::new(max_name_len),
            own: own::OwnLists::default(),
            own_sessions: AtomicUsize::new(0),
        }
    }

    /// `(page_size, max_name_len)` in force.
    fn paging(&self) -> (usize, usize) {
        (
            self.page_size.load(Ordering::Relaxed),
            self.max_name_len.load(Ordering::Relaxed),
        )
    }

    /// Puts a new `server.page_size` and `server.max_name_len` in force (hot
    /// reload) and rebuilds the views when either changed (then cursors of the
    /// old pages are stale, -32602, and names may be shortened differently).
    /// Returns whether anything changed; the caller announces `list_changed`.
    pub fn set_paging(&self, page_size: usize, max_name_len: usize) -> bool {
        if self.paging() == (page_size, max_name_len) {
            return false;
        }
        self.page_size.store(page_size, Ordering::Relaxed);
        self.max_name_len.store(max_name_len, Ordering::Relaxed);
        self.rebuild();
        true
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
    /// changed. Returns which of the three `list_changed` lists changed: none when
    /// every list holds the same items (in any order), so an unchanged refetch is
    /// announced to nobody and keeps the view (and its cursors) as it was.
    pub fn install(&self, idx: usize, fresh: BackendCatalog) -> Vec<Changed> {
        let b = self.backends.at(idx);
        let old = b.catalog();
        let changed = changed_lists(old.as_deref(), &fresh);
        // Capabilities and instructions may change across a restart with the
        // lists unchanged (the view must follow); that is nothing to announce.
        let same_init = old.as_ref().is_some_and(|o| {
            o.init.capabilities == fresh.init.capabilities
                && o.init.instructions == fresh.init.instructions
                && o.init.version == fresh.init.version
        });
        if changed.is_empty() && same_init {
            return changed;
        }
        b.set_catalog(Some(Arc::new(fresh)));
        self.rebuild();
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
        let (page_size, max_name_len) = self.paging();
        let view = View::build(&inputs, page_size, max_name_len, self.key.clone());
        self.access.record(generation, catalogs.clone());
        *current = Arc::new(view);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::backend::InitInfo;
    use crate::mcp::ProtocolVersion;

    fn lists(tools: Vec<serde_json::Value>) -> BackendCatalog {
        BackendCatalog {
            init: InitInfo {
                version: ProtocolVersion::LATEST,
                capabilities: json!({"tools": {"listChanged": true}}),
                instructions: None,
            },
            tools,
            prompts: vec![],
            resources: vec![],
            templates: vec![],
        }
    }

    #[test]
    fn same_items_ignores_order_but_not_content() {
        let a = json!({"name": "a", "inputSchema": {"type": "object", "properties": {}}});
        let b = json!({"name": "b", "inputSchema": {"type": "object"}});
        let a_reordered = json!({"inputSchema": {"properties": {}, "type": "object"}, "name": "a"});
        assert!(same_items(
            &[a.clone(), b.clone()],
            &[b.clone(), a_reordered]
        ));
        assert!(!same_items(
            &[a.clone(), b.clone()],
            &[a.clone(), a.clone()]
        ));
        assert!(!same_items(
            std::slice::from_ref(&a),
            &[a.clone(), b.clone()]
        ));
        let mut a2 = a.clone();
        a2["description"] = "new".into();
        assert!(!same_items(&[a], &[a2]));
    }

    #[test]
    fn an_unchanged_refetch_changes_nothing_and_keeps_the_view() {
        let config = Config::parse(
            "[backends.fx]\ntype = \"stdio\"\ncommand = \"x\"\n",
            std::path::Path::new("t.toml"),
            &|_| None,
        )
        .unwrap();
        let sealer = Arc::new(Sealer::fixed(7));
        let catalog = Catalog::new(&config, sealer);
        let t = |n: &str| json!({"name": n, "inputSchema": {"type": "object"}});
        assert_eq!(catalog.install(0, lists(vec![t("a"), t("b")])).len(), 3);
        let epoch = catalog.view().epoch;
        assert!(catalog.install(0, lists(vec![t("b"), t("a")])).is_empty());
        assert_eq!(catalog.view().epoch, epoch, "same view, cursors stay valid");
        assert_eq!(
            catalog.install(0, lists(vec![t("a"), t("c")])),
            vec![Changed::Tools]
        );
        assert_ne!(
            catalog.view().epoch,
            epoch,
            "a new epoch: old cursors are stale"
        );
    }
}
