//! Per-authorization-view catalogues: the policy maps a
//! principal to a [`ViewKey`]; the catalogue builds one filtered [`View`] per key
//! from the same catalogue snapshot as the aggregated view, caches it until the
//! catalogue changes, and serves lists and name lookups from it. Hidden items
//! are absent from lists and name tables, so calling one answers exactly as a
//! non-existent item ("Unknown tool", -32002 "Resource not found").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use super::Catalog;
use super::fetch::BackendCatalog;
use super::view::{ItemFilter, View};
use crate::auth::Principal;
use crate::auth::policy::{ItemKind, Policy, ViewKey};
use crate::config::{EndpointConfig, PolicyConfig};
use crate::mcp::ListKind;

/// Distinct views cached at most (one per combination of applicable rules).
const MAX_VIEWS: usize = 1024;

#[derive(Default)]
struct Snapshot {
    /// The catalogue's rebuild count when the snapshot was taken.
    generation: u64,
    catalogs: Vec<Option<Arc<BackendCatalog>>>,
}

/// The policy and the views derived from it.
pub struct Access {
    policy: RwLock<Arc<Policy>>,
    snapshot: RwLock<Arc<Snapshot>>,
    cache: Mutex<(u64, HashMap<ViewKey, Arc<View>>)>,
}

impl Access {
    /// Compiles the policy and the endpoints' filters.
    pub fn new(config: &PolicyConfig, endpoints: &BTreeMap<String, EndpointConfig>) -> Self {
        Access {
            policy: RwLock::new(Arc::new(Policy::compile(config, endpoints, 0))),
            snapshot: RwLock::default(),
            cache: Mutex::default(),
        }
    }

    fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .map(|p| p.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Records the catalogues the aggregated view of rebuild `generation` was
    /// built from; cached per-key views of older generations are dropped.
    pub(super) fn record(&self, generation: u64, catalogs: Vec<Option<Arc<BackendCatalog>>>) {
        if let Ok(mut s) = self.snapshot.write()
            && generation >= s.generation
        {
            *s = Arc::new(Snapshot {
                generation,
                catalogs,
            });
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

fn item_kind(kind: ListKind) -> ItemKind {
    match kind {
        ListKind::Tools => ItemKind::Tool,
        ListKind::Prompts => ItemKind::Prompt,
        ListKind::Resources | ListKind::Templates => ItemKind::Resource,
    }
}

impl Catalog {
    /// The view key of a principal at endpoint `endpoint` (`[endpoints.NAME]`;
    /// `""`: the whole gateway, when no endpoints are configured).
    pub fn view_key_at(&self, endpoint: &str, principal: Option<&Principal>) -> ViewKey {
        self.access.policy().key_at(endpoint, principal)
    }

    /// The endpoint a describing caller means (`mcpgate catalog --endpoint`,
    /// `/admin/catalog?endpoint=`): `name` when `[endpoints]` has it; `""` when no
    /// endpoints are configured and none is named.
    ///
    /// Errors: a name that is not configured, or none named while endpoints are
    /// configured (the message lists them).
    pub fn endpoint(&self, name: Option<&str>) -> Result<String, String> {
        let policy = self.access.policy();
        let names = policy.endpoint_names();
        match name {
            None if names.is_empty() => Ok(String::new()),
            Some(n) if names.contains(&n) => Ok(n.to_owned()),
            Some(n) if names.is_empty() => Err(format!(
                "no endpoint is named {n:?}: the configuration has no [endpoints]"
            )),
            _ => Err(format!(
                "name an endpoint ({}): {}",
                if name.is_some() {
                    "unknown"
                } else {
                    "several are configured"
                },
                names.join(", ")
            )),
        }
    }

    /// Replaces the policy and the endpoints' filters (hot reload), compiled as the
    /// next generation: cached views are dropped, and keys derived from the old
    /// policy see nothing until they are derived again ([`Catalog::view_key_at`]).
    pub fn set_policy(&self, config: &PolicyConfig, endpoints: &BTreeMap<String, EndpointConfig>) {
        let mut p = self
            .access
            .policy
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *p = Arc::new(Policy::compile(config, endpoints, p.generation() + 1));
        drop(p);
        if let Ok(mut c) = self.access.cache.lock() {
            c.1.clear();
        }
    }

    /// The catalogue for a view key: the aggregated view when the policy is
    /// open and the key is the whole gateway's, else the cached filtered view (built on first use).
    pub fn view_for_key(&self, key: &ViewKey) -> Arc<View> {
        let policy = self.access.policy();
        if policy.is_open_for(key) {
            return self.view();
        }
        let snap = self.access.snapshot();
        if let Ok(mut c) = self.access.cache.lock() {
            if c.0 != snap.generation {
                *c = (snap.generation, HashMap::new());
            }
            if let Some(v) = c.1.get(key) {
                return v.clone();
            }
        }
        let view = Arc::new(self.build_filtered(&snap.catalogs, key, policy));
        if let Ok(mut c) = self.access.cache.lock()
            && c.0 == snap.generation
            && key.generation() == self.access.policy().generation()
        {
            if c.1.len() >= MAX_VIEWS {
                c.1.clear();
            }
            c.1.insert(key.clone(), view.clone());
        }
        view
    }

    /// The view key `key` sees of `catalogs` (one per backend index), built
    /// afresh (not cached): for a session whose own connections list otherwise
    /// (`own.rs`).
    pub(super) fn build_for_key(
        &self,
        catalogs: &[Option<Arc<BackendCatalog>>],
        key: &ViewKey,
    ) -> View {
        let policy = self.access.policy();
        if policy.is_open_for(key) {
            let backends = self.backends.snapshot();
            let inputs = super::registry::view_inputs(&backends, catalogs);
            let (page_size, max_name_len) = self.paging();
            return View::build(&inputs, page_size, max_name_len, self.key.clone());
        }
        self.build_filtered(catalogs, key, policy)
    }

    fn build_filtered(
        &self,
        catalogs: &[Option<Arc<BackendCatalog>>],
        key: &ViewKey,
        policy: Arc<Policy>,
    ) -> View {
        let backends = self.backends.snapshot();
        let names: Arc<[Arc<str>]> = backends.iter().map(|b| b.spec.name.clone()).collect();
        let key = key.clone();
        let filter: ItemFilter = Arc::new(move |idx, kind, name| {
            names
                .get(idx)
                .is_some_and(|b| policy.allows(&key, b, item_kind(kind), name))
        });
        let inputs = super::registry::view_inputs(&backends, catalogs);
        let (page_size, max_name_len) = self.paging();
        View::build_filtered(
            &inputs,
            page_size,
            max_name_len,
            self.key.clone(),
            Some(filter),
        )
    }
}

/// Whether `visible` lets anything of backend `idx`'s catalogue through.
pub(super) fn any_visible(
    cat: &BackendCatalog,
    idx: usize,
    visible: &dyn Fn(usize, ListKind, &str) -> bool,
) -> bool {
    let named = |items: &[serde_json::Value], kind: ListKind, field: &str| {
        items.iter().any(|i| {
            i.get(field)
                .and_then(serde_json::Value::as_str)
                .is_some_and(|n| visible(idx, kind, n))
        })
    };
    named(&cat.tools, ListKind::Tools, "name")
        || named(&cat.prompts, ListKind::Prompts, "name")
        || named(&cat.resources, ListKind::Resources, "uri")
        || named(&cat.templates, ListKind::Templates, "uriTemplate")
}
