//! The aggregated catalogue hosts see: exposed names, the reversible name table,
//! URI routing and pre-serialized pages with opaque, sealed cursors.

use std::sync::{Arc, OnceLock};

use foldhash::{HashMap, HashMapExt};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::curation::ToolFilterSet;
use super::cursor::CursorKey;
use super::fetch::BackendCatalog;
use crate::mcp::ListKind;
use crate::mcp::names;
use crate::streamable_http::ParamHeaders;

/// Where an exposed tool or prompt name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Backend index.
    pub backend: usize,
    /// The backend's own name for it.
    pub original: String,
    /// A tool's `x-mcp-header` annotations, when it has any (`Mcp-Param-*`
    /// headers checked on 2026-07-28 requests and mirrored to HTTP backends).
    pub headers: Option<Arc<ParamHeaders>>,
}

/// Which items a view shows, by (backend index, list, the backend's own name or
/// URI); see `catalog/access.rs`.
pub type ItemFilter = Arc<dyn Fn(usize, ListKind, &str) -> bool + Send + Sync>;

/// What the view needs to know about one backend.
pub struct ViewInput<'a> {
    /// Backend name.
    pub name: &'a str,
    /// Tool/prompt name prefix (`""` = unprefixed).
    pub prefix: &'a str,
    /// URI prefix (`""` = unprefixed).
    pub uri_prefix: &'a str,
    /// Which original tool names are exposed.
    pub tools: &'a ToolFilterSet,
    /// The backend's catalogue, if it could be fetched.
    pub catalog: Option<&'a BackendCatalog>,
}

/// The aggregated catalogue at one point in time (one epoch).
pub struct View {
    /// A digest of the view's lists (`pages.rs`): changes whenever what the view
    /// lists changes, so cursors of an older one are refused; the same on every
    /// process that serves the same lists, so cursors open there.
    pub epoch: u64,
    pub(super) pages: [Vec<Box<RawValue>>; 4],
    /// Exposed tool name → backend tool.
    pub tools: HashMap<String, Route>,
    /// Exposed prompt name → backend prompt.
    pub prompts: HashMap<String, Route>,
    uri_prefixes: HashMap<String, usize>,
    unprefixed_uris: HashMap<String, usize>,
    unprefixed_templates: Vec<(String, usize)>,
    unprefixed_resource_backends: Vec<usize>,
    /// Union of backend server capabilities (always with `listChanged`).
    pub capabilities: Value,
    /// Backend instructions, merged.
    pub instructions: Option<String>,
    pub(super) key: CursorKey,
    /// Pages for hosts on 2025-06-18 and 2025-03-26, derived on first use.
    pub(super) older: [OnceLock<[Vec<Box<RawValue>>; 4]>; 2],
    /// Pages shaped for 2026-07-28 hosts, built on first use.
    pub(super) modern: OnceLock<[Vec<Box<RawValue>>; 4]>,
    /// The authorization filter of this view (`None`: everything visible);
    /// resource reads are checked against it.
    filter: Option<ItemFilter>,
}

impl View {
    /// Builds the view from every backend's catalogue.
    pub fn build(
        inputs: &[ViewInput<'_>],
        page_size: usize,
        max_name_len: usize,
        key: CursorKey,
    ) -> View {
        View::build_filtered(inputs, page_size, max_name_len, key, None)
    }

    /// Builds the view showing only what `filter` allows. Exposed names are
    /// claimed over every item first, so an item has the same name in every view.
    pub fn build_filtered(
        inputs: &[ViewInput<'_>],
        page_size: usize,
        max_name_len: usize,
        key: CursorKey,
        filter: Option<ItemFilter>,
    ) -> View {
        let visible = |idx: usize, kind: ListKind, name: &str| {
            filter.as_ref().is_none_or(|f| f(idx, kind, name))
        };
        let mut hidden: Vec<(ListKind, String)> = Vec::new();
        let mut lists: [Vec<Value>; 4] = Default::default();
        let mut tools = HashMap::new();
        let mut prompts = HashMap::new();
        let mut uri_prefixes = HashMap::new();
        let mut unprefixed_uris: HashMap<String, usize> = HashMap::new();
        let mut unprefixed_templates = Vec::new();
        let mut unprefixed_resource_backends = Vec::new();
        let mut subscribe = false;
        let mut completions = false;
        let mut tasks = false;
        let mut instructions = Vec::new();
        for (idx, input) in inputs.iter().enumerate() {
            if !input.uri_prefix.is_empty() {
                uri_prefixes.insert(input.uri_prefix.to_ascii_lowercase(), idx);
            }
            let Some(cat) = input.catalog else { continue };
            // A backend the caller sees nothing of does not lend its instructions.
            let shown = filter.is_none() || super::access::any_visible(cat, idx, &visible);
            let caps = &cat.init.capabilities;
            subscribe |= caps.pointer("/resources/subscribe") == Some(&Value::Bool(true));
            completions |= cat.init.has("completions");
            let backend_tasks = caps.pointer("/tasks/requests/tools/call").is_some();
            tasks |= backend_tasks;
            if let Some(text) = cat
                .init
                .instructions
                .as_deref()
                .filter(|t| shown && !t.trim().is_empty())
            {
                instructions.push(format!("## {}\n{}", input.name, text.trim()));
            }
            for tool in &cat.tools {
                let Some(original) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if !input.tools.allows(original) {
                    continue;
                }
                let curated = input.tools.override_for(original);
                let public = curated.and_then(|o| o.name.as_deref()).unwrap_or(original);
                let exposed = claim(&mut tools, input, idx, original, public, max_name_len);
                if let Some(h) = param_headers(tool)
                    && let Some(r) = tools.get_mut(&exposed)
                {
                    r.headers = Some(h);
                }
                if !visible(idx, ListKind::Tools, original) {
                    hidden.push((ListKind::Tools, exposed));
                    continue;
                }
                let mut item = expose_item(tool, input, public, &exposed);
                if let Some(o) = curated {
                    super::curation::present(&mut item, o);
                }
                if !backend_tasks {
                    // The capability is per server; after aggregation the per-tool
                    // field is the only switch (MCP 2025-11-25 checklist §8.5).
                    if let Some(exec) = item.get_mut("execution").and_then(Value::as_object_mut) {
                        exec.remove("taskSupport");
                    }
                }
                lists[0].push(item);
            }
            for prompt in &cat.prompts {
                let Some(original) = prompt.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let exposed = claim(&mut prompts, input, idx, original, original, max_name_len);
                if !visible(idx, ListKind::Prompts, original) {
                    hidden.push((ListKind::Prompts, exposed));
                    continue;
                }
                lists[1].push(expose_item(prompt, input, original, &exposed));
            }
            if input.uri_prefix.is_empty() && cat.init.has("resources") {
                unprefixed_resource_backends.push(idx);
            }
            for res in &cat.resources {
                let Some(uri) = res.get("uri").and_then(Value::as_str) else {
                    continue;
                };
                if !visible(idx, ListKind::Resources, uri) {
                    continue;
                }
                if input.uri_prefix.is_empty() {
                    if let Some(&other) = unprefixed_uris.get(uri) {
                        tracing::warn!(
                            backend = input.name,
                            uri,
                            other = inputs[other].name,
                            "resource URI offered by two unprefixed backends; the first one keeps it"
                        );
                        continue;
                    }
                    unprefixed_uris.insert(uri.to_owned(), idx);
                }
                let mut item = res.clone();
                item["uri"] = names::expose_uri(input.uri_prefix, uri).into();
                lists[2].push(item);
            }
            for tpl in &cat.templates {
                let Some(t) = tpl.get("uriTemplate").and_then(Value::as_str) else {
                    continue;
                };
                if !visible(idx, ListKind::Templates, t) {
                    continue;
                }
                if input.uri_prefix.is_empty() {
                    let literal = t.split('{').next().unwrap_or_default().to_owned();
                    unprefixed_templates.push((literal, idx));
                }
                let mut item = tpl.clone();
                item["uriTemplate"] = names::expose_uri(input.uri_prefix, t).into();
                lists[3].push(item);
            }
        }
        for (kind, name) in hidden {
            match kind {
                ListKind::Tools => tools.remove(&name),
                _ => prompts.remove(&name),
            };
        }
        // Longest literal prefix first, so the most specific template wins.
        unprefixed_templates.sort_by_key(|t| std::cmp::Reverse(t.0.len()));
        let mut capabilities = json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": subscribe, "listChanged": true},
            "logging": {},
        });
        if completions {
            capabilities["completions"] = json!({});
        }
        if tasks {
            capabilities["tasks"] =
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        let page_size = page_size.max(1);
        let mut view = View {
            epoch: super::pages::digest(&lists, page_size),
            pages: Default::default(),
            tools,
            prompts,
            uri_prefixes,
            unprefixed_uris,
            unprefixed_templates,
            unprefixed_resource_backends,
            capabilities,
            instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            key,
            older: Default::default(),
            modern: OnceLock::new(),
            filter,
        };
        for (i, items) in lists.into_iter().enumerate() {
            let kind = [
                ListKind::Tools,
                ListKind::Prompts,
                ListKind::Resources,
                ListKind::Templates,
            ][i];
            view.pages[i] = view.paginate(kind, &items, page_size);
        }
        view
    }

    /// Routes an exposed resource URI (or URI template) to `(backend, original)`.
    pub fn route_uri(&self, uri: &str) -> Option<(usize, String)> {
        let routed = self.route_uri_unfiltered(uri)?;
        match &self.filter {
            Some(f) if !f(routed.0, ListKind::Resources, &routed.1) => None,
            _ => Some(routed),
        }
    }

    fn route_uri_unfiltered(&self, uri: &str) -> Option<(usize, String)> {
        if let Some((prefix, rest)) = names::split_uri(uri)
            && let Some(&b) = self.uri_prefixes.get(&prefix.to_ascii_lowercase())
        {
            return Some((b, rest.to_owned()));
        }
        if let Some(&b) = self.unprefixed_uris.get(uri) {
            return Some((b, uri.to_owned()));
        }
        if let Some((_, b)) = self
            .unprefixed_templates
            .iter()
            .find(|(lit, _)| !lit.is_empty() && uri.starts_with(lit.as_str()))
        {
            return Some((*b, uri.to_owned()));
        }
        match self.unprefixed_resource_backends.as_slice() {
            [only] => Some((*only, uri.to_owned())),
            _ => None,
        }
    }
}

/// A tool's `x-mcp-header` annotations, `None` when it has none (invalid ones
/// were dropped with their tool by `fetch::repair_tool`).
fn param_headers(tool: &Value) -> Option<Arc<ParamHeaders>> {
    let headers = ParamHeaders::from_schema(tool.get("inputSchema")?).ok()?;
    (!headers.is_empty()).then(|| Arc::new(headers))
}

/// Picks the exposed name for `original`, resolving collisions deterministically:
/// the first claimant (backends in name order, items in backend order) keeps the
/// plain name; later ones get a suffix derived from backend and original name.
fn claim(
    table: &mut HashMap<String, Route>,
    input: &ViewInput<'_>,
    idx: usize,
    original: &str,
    public: &str,
    max_len: usize,
) -> String {
    let route = Route {
        backend: idx,
        original: original.to_owned(),
        headers: None,
    };
    let plain = names::expose(input.prefix, public, max_len);
    if !table.contains_key(&plain) {
        table.insert(plain.clone(), route);
        return plain;
    }
    let salt = format!("{}/{original}", input.name);
    let mut n = 0u32;
    loop {
        let suffix = names::short_hash(&format!("{salt}#{n}"));
        let name = names::with_suffix(&plain, &suffix, max_len);
        if !table.contains_key(&name) {
            tracing::warn!(backend = input.name, original, exposed = %name, "name collision: exposed under a disambiguated name");
            table.insert(name.clone(), route);
            return name;
        }
        n += 1;
    }
}

/// A tool or prompt as exposed: new `name`; the original name as `title` when the
/// name had to change and no title exists; URIs in `_meta.ui` rewritten.
fn expose_item(item: &Value, input: &ViewInput<'_>, original: &str, exposed: &str) -> Value {
    let mut item = item.clone();
    item["name"] = exposed.into();
    let plain = if input.prefix.is_empty() {
        original.to_owned()
    } else {
        format!("{}{}{original}", input.prefix, names::SEPARATOR)
    };
    if exposed != plain && item.get("title").is_none() {
        item["title"] = original.into();
    }
    if !input.uri_prefix.is_empty()
        && let Some(Value::String(uri)) = item.pointer_mut("/_meta/ui/resourceUri")
    {
        *uri = names::expose_uri(input.uri_prefix, uri);
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::InitInfo;
    use crate::mcp::ProtocolVersion;

    fn catalog(tools: &[&str], resources: &[&str], templates: &[&str]) -> BackendCatalog {
        BackendCatalog {
            init: InitInfo {
                version: ProtocolVersion::LATEST,
                capabilities: json!({"tools": {}, "resources": {"subscribe": true}}),
                instructions: None,
            },
            tools: tools
                .iter()
                .map(|t| json!({"name": t, "inputSchema": {"type": "object"}}))
                .collect(),
            prompts: vec![],
            resources: resources
                .iter()
                .map(|u| json!({"uri": u, "name": u}))
                .collect(),
            templates: templates
                .iter()
                .map(|u| json!({"uriTemplate": u, "name": u}))
                .collect(),
        }
    }

    static ALL: std::sync::LazyLock<ToolFilterSet> =
        std::sync::LazyLock::new(ToolFilterSet::default);

    fn input<'a>(name: &'a str, prefix: &'a str, cat: &'a BackendCatalog) -> ViewInput<'a> {
        ViewInput {
            name,
            prefix,
            uri_prefix: prefix,
            tools: &ALL,
            catalog: Some(cat),
        }
    }

    fn build(inputs: &[ViewInput<'_>], page_size: usize) -> View {
        View::build(inputs, page_size, 128, CursorKey::fixed(1))
    }

    fn items(view: &View, kind: ListKind) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page: Value = serde_json::from_str(
                view.page(kind, cursor.as_deref(), ProtocolVersion::LATEST)
                    .unwrap()
                    .get(),
            )
            .unwrap();
            out.extend(page[kind.key()].as_array().unwrap().iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => return out,
            }
        }
    }

    #[test]
    fn namespaces_and_routes() {
        let a = catalog(
            &["echo", "b__c"],
            &["file:///public/readme.txt"],
            &["note://{id}"],
        );
        let b = catalog(&["echo"], &["file:///public/readme.txt"], &["item://{id}"]);
        let v = build(&[input("a", "a", &a), input("a-b", "a-b", &b)], 100);
        let names: Vec<String> = items(&v, ListKind::Tools)
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a__echo", "a__b__c", "a-b__echo"]);
        assert_eq!(
            v.tools["a__b__c"],
            Route {
                backend: 0,
                original: "b__c".into(),
                headers: None
            }
        );
        assert_eq!(
            v.tools["a-b__echo"],
            Route {
                backend: 1,
                original: "echo".into(),
                headers: None
            }
        );
        let uris: Vec<Value> = items(&v, ListKind::Resources)
            .iter()
            .map(|r| r["uri"].clone())
            .collect();
        assert_eq!(
            uris,
            [
                json!("a+file:///public/readme.txt"),
                json!("a-b+file:///public/readme.txt")
            ]
        );
        assert_eq!(
            v.route_uri("a-b+file:///public/readme.txt"),
            Some((1, "file:///public/readme.txt".into()))
        );
        assert_eq!(v.route_uri("a+note://42"), Some((0, "note://42".into())));
        assert_eq!(v.route_uri("file:///nope"), None);
        assert_eq!(v.capabilities["resources"]["subscribe"], json!(true));
    }

    #[test]
    fn unprefixed_collisions_keep_both_deterministically() {
        let eu = catalog(&["query"], &[], &[]);
        let us = catalog(&["query"], &[], &[]);
        let v1 = build(&[input("prom-eu", "", &eu), input("prom-us", "", &us)], 100);
        let names: Vec<String> = items(&v1, ListKind::Tools)
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names.len(), 2);
        assert_eq!(names[0], "query");
        assert!(names[1].starts_with("query-"), "{names:?}");
        assert_eq!(v1.tools[&names[1]].backend, 1);
        let v2 = build(&[input("prom-eu", "", &eu), input("prom-us", "", &us)], 100);
        assert!(v2.tools.contains_key(&names[1]));
    }

    #[test]
    fn unprefixed_uris_route_by_list_then_template() {
        let a = catalog(&[], &["test://static-text"], &["test://template/{id}/data"]);
        let v = build(&[input("demo", "", &a)], 100);
        assert_eq!(
            v.route_uri("test://static-text"),
            Some((0, "test://static-text".into()))
        );
        assert_eq!(
            v.route_uri("test://template/5/data"),
            Some((0, "test://template/5/data".into()))
        );
        assert_eq!(v.route_uri("other://x"), Some((0, "other://x".into())));
    }

    #[test]
    fn pages_and_cursors() {
        let names: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let a = catalog(&refs, &[], &[]);
        let v = build(&[input("a", "a", &a)], 2);
        assert_eq!(items(&v, ListKind::Tools).len(), 5);
        let first: Value = serde_json::from_str(
            v.page(ListKind::Tools, None, ProtocolVersion::LATEST)
                .unwrap()
                .get(),
        )
        .unwrap();
        let cursor = first["nextCursor"].as_str().unwrap();
        assert!(
            v.page(ListKind::Tools, Some(cursor), ProtocolVersion::LATEST)
                .is_some()
        );
        assert!(
            v.page(ListKind::Prompts, Some(cursor), ProtocolVersion::LATEST)
                .is_none(),
            "cursor of another list"
        );
        assert!(
            v.page(ListKind::Tools, Some("garbage"), ProtocolVersion::LATEST)
                .is_none()
        );
        let mut forged = cursor.to_owned().into_bytes();
        forged[10] = if forged[10] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert!(
            v.page(ListKind::Tools, Some(&forged), ProtocolVersion::LATEST)
                .is_none()
        );
        // Same lists, another build (another replica, a restart): same epoch,
        // the cursor opens. Other lists: a new epoch, the cursor is stale.
        let same = View::build(&[input("a", "a", &a)], 2, 128, CursorKey::fixed(1));
        assert_eq!(same.epoch, v.epoch);
        assert!(
            same.page(ListKind::Tools, Some(cursor), ProtocolVersion::LATEST)
                .is_some()
        );
        let refs6: Vec<&str> = refs.iter().copied().chain(["t5"]).collect();
        let a6 = catalog(&refs6, &[], &[]);
        let newer = View::build(&[input("a", "a", &a6)], 2, 128, CursorKey::fixed(1));
        assert_ne!(newer.epoch, v.epoch);
        assert!(
            newer
                .page(ListKind::Tools, Some(cursor), ProtocolVersion::LATEST)
                .is_none(),
            "stale epoch"
        );
        let resized = View::build(&[input("a", "a", &a)], 3, 128, CursorKey::fixed(1));
        assert_ne!(resized.epoch, v.epoch, "page numbers mean other items");
        let empty = build(&[], 2);
        let page: Value = serde_json::from_str(
            empty
                .page(ListKind::Prompts, None, ProtocolVersion::LATEST)
                .unwrap()
                .get(),
        )
        .unwrap();
        assert_eq!(page, json!({"prompts": []}));
    }
}
