//! What a principal sees: the lists as `tools/list`, `prompts/list`,
//! `resources/list` and `resources/templates/list` return them to that principal
//! (2025-11-25 shapes, every page joined), each item with the backend it routes
//! to, and the names the policy hid from it (`mcpgate catalog`).

use serde_json::{Map, Value, json};

use super::Catalog;
use super::view::View;
use crate::auth::Principal;
use crate::mcp::{ListKind, ProtocolVersion};

/// The lists in the order `mcpgate catalog` prints them, with the result key
/// and the field that names an item.
const LISTS: [(ListKind, &str, &str); 4] = [
    (ListKind::Tools, "tools", "name"),
    (ListKind::Prompts, "prompts", "name"),
    (ListKind::Resources, "resources", "uri"),
    (ListKind::Templates, "resourceTemplates", "uriTemplate"),
];

/// What `principal` (`None`: an unauthenticated host) is shown at `endpoint`
/// (`[endpoints.NAME]`, `""` without endpoints; see [`Catalog::endpoint`]) by `catalog`, as JSON:
/// `{"tools": [ITEM…], "prompts": […], "resources": […], "resourceTemplates":
/// […], "hidden": {"tools": [NAME…], …}}` where each ITEM is the listed item
/// with `"backend"` (the backend it routes to) added, and `hidden` names what
/// the full catalogue lists but the policy (or the endpoint) keeps from this principal.
pub fn describe(catalog: &Catalog, endpoint: &str, principal: Option<&Principal>) -> Value {
    let key = catalog.view_key_at(endpoint, principal);
    let seen = catalog.view_for_key(&key);
    let all = catalog.view();
    let mut out = Map::new();
    let mut hidden = Map::new();
    for (kind, field, id) in LISTS {
        let items = listed(&seen, kind, field);
        let shown: Vec<&str> = items.iter().filter_map(|i| i[id].as_str()).collect();
        let not_shown: Vec<Value> = listed(&all, kind, field)
            .iter()
            .filter_map(|i| i[id].as_str())
            .filter(|n| !shown.contains(n))
            .map(Value::from)
            .collect();
        let items: Vec<Value> = items
            .iter()
            .map(|item| {
                let mut item = item.clone();
                let backend = item[id]
                    .as_str()
                    .and_then(|n| backend_of(catalog, &seen, kind, n));
                if let Some(obj) = item.as_object_mut() {
                    obj.insert("backend".into(), json!(backend));
                }
                item
            })
            .collect();
        out.insert(field.into(), Value::Array(items));
        hidden.insert(field.into(), Value::Array(not_shown));
    }
    out.insert("hidden".into(), Value::Object(hidden));
    Value::Object(out)
}

/// The name of the backend an exposed item of `kind` routes to.
fn backend_of(catalog: &Catalog, view: &View, kind: ListKind, name: &str) -> Option<String> {
    let idx = match kind {
        ListKind::Tools => view.tools.get(name).map(|r| r.backend),
        ListKind::Prompts => view.prompts.get(name).map(|r| r.backend),
        ListKind::Resources | ListKind::Templates => view.route_uri(name).map(|(b, _)| b),
    }?;
    Some(catalog.backend(idx).spec.name.to_string())
}

/// Every item of one list, all pages joined, as a 2025-11-25 host receives it.
fn listed(view: &View, kind: ListKind, field: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    while let Some(page) = view.page(kind, cursor.as_deref(), ProtocolVersion::V2025_11_25) {
        let Ok(page) = serde_json::from_str::<Value>(page.get()) else {
            break;
        };
        if let Some(list) = page[field].as_array() {
            items.extend(list.iter().cloned());
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    items
}
