//! Tool curation (independent of auth): per backend, a tool may
//! be renamed (the exposed name is still `{prefix}__{name}` and obeys the name
//! rules, checked at config load), get a new title and description, and have
//! fixed argument values that the host never sees: they are removed from the
//! exposed `inputSchema` and set on every `tools/call`.

use std::collections::{BTreeMap, HashMap};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Map, Value};

use crate::config::ToolOverride;

/// `tools.include` / `tools.exclude` globs of a backend, compiled, and its
/// curation overrides (`router/curation.rs`).
#[derive(Debug, Clone, Default)]
pub struct ToolFilterSet {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
    overrides: HashMap<String, ToolOverride>,
}

impl ToolFilterSet {
    /// Compiles the glob lists (invalid globs were rejected by config validation).
    pub fn new(include: &[String], exclude: &[String]) -> Self {
        fn set(patterns: &[String]) -> Option<GlobSet> {
            if patterns.is_empty() {
                return None;
            }
            let mut b = GlobSetBuilder::new();
            for p in patterns {
                if let Ok(g) = Glob::new(p) {
                    b.add(g);
                }
            }
            b.build().ok()
        }
        ToolFilterSet {
            include: set(include),
            exclude: set(exclude),
            overrides: HashMap::new(),
        }
    }

    /// Whether the tool with this original name is exposed.
    pub fn allows(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(name))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(name))
    }
}

impl ToolFilterSet {
    /// Adds the curation overrides (by original tool name).
    pub fn with_overrides(mut self, overrides: &BTreeMap<String, ToolOverride>) -> Self {
        self.overrides = overrides
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self
    }

    /// The curation of the tool with this original name, if any.
    pub fn override_for(&self, original: &str) -> Option<&ToolOverride> {
        self.overrides.get(original)
    }
}

/// Applies title, description and hidden arguments to an exposed tool item.
pub fn present(item: &mut Value, o: &ToolOverride) {
    if let Some(t) = &o.title {
        item["title"] = t.clone().into();
    }
    if let Some(d) = &o.description {
        item["description"] = d.clone().into();
    }
    if o.arguments.is_empty() {
        return;
    }
    let Some(schema) = item.get_mut("inputSchema").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for k in o.arguments.keys() {
            props.remove(k);
        }
    }
    if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
        req.retain(|r| r.as_str().is_none_or(|r| !o.arguments.contains_key(r)));
    }
}

/// Sets the fixed arguments on `tools/call` params (the host cannot override
/// them: they replace whatever it sent under those names).
pub fn inject(params: &mut Value, o: &ToolOverride) {
    if o.arguments.is_empty() {
        return;
    }
    if !params.get("arguments").is_some_and(Value::is_object) {
        params["arguments"] = Value::Object(Map::new());
    }
    if let Some(args) = params.get_mut("arguments").and_then(Value::as_object_mut) {
        for (k, v) in &o.arguments {
            args.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tool_filters() {
        let f = ToolFilterSet::new(&["get_*".into(), "echo".into()], &["get_secret".into()]);
        assert!(f.allows("get_time"));
        assert!(f.allows("echo"));
        assert!(!f.allows("get_secret"));
        assert!(!f.allows("delete_all"));
        assert!(ToolFilterSet::default().allows("anything"));
    }

    use super::*;
    use serde_json::json;

    fn curated() -> ToolOverride {
        ToolOverride {
            name: Some("open_ticket".into()),
            title: Some("Open a ticket".into()),
            description: Some("Files a ticket in the ops queue.".into()),
            arguments: json!({"queue": "ops"}).as_object().unwrap().clone(),
        }
    }

    #[test]
    fn hidden_arguments_leave_the_schema() {
        let mut item = json!({
            "name": "x", "description": "old",
            "inputSchema": {"type": "object",
                "properties": {"queue": {"type": "string"}, "text": {"type": "string"}},
                "required": ["queue", "text"]}
        });
        present(&mut item, &curated());
        assert_eq!(item["title"], "Open a ticket");
        assert_eq!(item["description"], "Files a ticket in the ops queue.");
        assert_eq!(
            item["inputSchema"]["properties"],
            json!({"text": {"type": "string"}})
        );
        assert_eq!(item["inputSchema"]["required"], json!(["text"]));
    }

    #[test]
    fn injected_arguments_win() {
        let mut p = json!({"name": "t", "arguments": {"text": "hi", "queue": "sneaky"}});
        inject(&mut p, &curated());
        assert_eq!(p["arguments"], json!({"text": "hi", "queue": "ops"}));
        let mut p = json!({"name": "t"});
        inject(&mut p, &curated());
        assert_eq!(p["arguments"], json!({"queue": "ops"}));
    }
}
