//! The authorization policy (`[policy]`): which backends, tools, prompts and
//! resources exist for a caller (DESIGN decision 7: what a caller may not call
//! is also not listed).
//!
//! A principal maps to a [`ViewKey`]: the set of rules whose `scopes` and
//! `claims` it satisfies. Everything else depends only on the key, so the router
//! builds one filtered catalogue per key and reuses it for every caller with the
//! same key. For an item, a matching `deny` rule wins, then a matching `allow`;
//! an item no applicable rule matches gets the policy's `default`.

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::Principal;
use crate::config::{Effect, PolicyConfig, RuleConfig};

/// The kinds of items a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A tool (by the backend's own name).
    Tool,
    /// A prompt (by the backend's own name).
    Prompt,
    /// A resource or resource template (by the backend's own URI).
    Resource,
}

/// The rules that apply to a principal, by index into the policy of one
/// generation (a reload compiles a new generation); equal keys see equal views.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ViewKey {
    generation: u64,
    rules: Arc<[u32]>,
}

impl ViewKey {
    /// The rule indices.
    pub fn rules(&self) -> &[u32] {
        &self.rules
    }

    /// The policy generation the indices refer to.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

struct Rule {
    effect: Effect,
    scopes: Vec<String>,
    claims: Vec<(String, Value)>,
    backends: GlobSet,
    tools: Option<GlobSet>,
    prompts: Option<GlobSet>,
    resources: Option<GlobSet>,
}

/// The compiled policy.
pub struct Policy {
    generation: u64,
    default: Effect,
    rules: Vec<Rule>,
}

fn globs(patterns: &[String]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        // Invalid globs were rejected by config validation.
        if let Ok(g) = Glob::new(p) {
            b.add(g);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

impl Rule {
    fn new(r: &RuleConfig) -> Rule {
        let all = r.tools.is_none() && r.prompts.is_none() && r.resources.is_none();
        let kind = |list: &Option<Vec<String>>| match list {
            Some(l) => Some(globs(l)),
            None if all => Some(globs(&["*".to_string()])),
            None => None,
        };
        Rule {
            effect: r.effect,
            scopes: r.scopes.clone(),
            claims: r
                .claims
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            backends: globs(&r.backends),
            tools: kind(&r.tools),
            prompts: kind(&r.prompts),
            resources: kind(&r.resources),
        }
    }

    fn applies(&self, p: Option<&Principal>) -> bool {
        if self.scopes.is_empty() && self.claims.is_empty() {
            return true;
        }
        let Some(p) = p else { return false };
        self.scopes.iter().all(|s| p.scopes.contains(s))
            && self.claims.iter().all(|(k, want)| {
                p.claims
                    .get(k)
                    .is_some_and(|have| claim_matches(have, want))
            })
    }

    fn matches(&self, backend: &str, kind: ItemKind, name: &str) -> bool {
        let set = match kind {
            ItemKind::Tool => &self.tools,
            ItemKind::Prompt => &self.prompts,
            ItemKind::Resource => &self.resources,
        };
        self.backends.is_match(backend) && set.as_ref().is_some_and(|s| s.is_match(name))
    }
}

/// A claim matches a configured value when equal, or when either side is an
/// array that contains the other's value (e.g. `groups = "ops"` against
/// `"groups": ["dev", "ops"]`).
fn claim_matches(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Array(any)) => any.iter().any(|w| claim_matches(have, w)),
        (Value::Array(items), w) => items.iter().any(|h| h == w),
        (h, w) => h == w,
    }
}

impl Policy {
    /// Compiles `[policy]` (generation 0).
    pub fn new(config: &PolicyConfig) -> Policy {
        Self::with_generation(config, 0)
    }

    /// Compiles `[policy]` as generation `generation`: its keys never equal the
    /// keys of another generation.
    pub fn with_generation(config: &PolicyConfig, generation: u64) -> Policy {
        Policy {
            generation,
            default: config.default,
            rules: config.rules.iter().map(Rule::new).collect(),
        }
    }

    /// This policy's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether every caller sees everything (no rules, default allow): the
    /// router then serves the one aggregated view.
    pub fn is_open(&self) -> bool {
        self.rules.is_empty() && self.default == Effect::Allow
    }

    /// The view key of a principal (`None`: unauthenticated).
    pub fn key(&self, p: Option<&Principal>) -> ViewKey {
        let applicable: Vec<u32> = (0..self.rules.len() as u32)
            .filter(|i| self.rules[*i as usize].applies(p))
            .collect();
        ViewKey {
            generation: self.generation,
            rules: applicable.into(),
        }
    }

    /// Whether an item is visible under `key`. A key of another generation
    /// sees nothing (its rule indices mean other rules here).
    pub fn allows(&self, key: &ViewKey, backend: &str, kind: ItemKind, name: &str) -> bool {
        if key.generation != self.generation {
            return false;
        }
        let mut allowed = None;
        for &i in key.rules() {
            let Some(rule) = self.rules.get(i as usize) else {
                continue;
            };
            if rule.matches(backend, kind, name) {
                match rule.effect {
                    Effect::Deny => return false,
                    Effect::Allow => allowed = Some(true),
                }
            }
        }
        allowed.unwrap_or(self.default == Effect::Allow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::new(&toml::from_str::<PolicyConfig>(text).unwrap())
    }

    fn principal(scopes: &[&str], claims: &Value) -> Principal {
        let mut p = Principal::new("https://as", "u", scopes, "t");
        p.claims = claims.as_object().cloned().unwrap_or_default();
        p
    }

    #[test]
    fn open_policy() {
        let p = policy("");
        assert!(p.is_open());
        assert!(p.allows(&p.key(None), "a", ItemKind::Tool, "x"));
    }

    #[test]
    fn scopes_pick_tools() {
        let p = policy(
            r#"
            default = "deny"
            [[rules]]
            scopes = ["tools:read"]
            backends = ["demo"]
            tools = ["echo"]
            [[rules]]
            scopes = ["tools:admin"]
            backends = ["demo"]
            [[rules]]
            effect = "deny"
            claims = { groups = ["contractors"] }
            tools = ["delete_*"]
            "#,
        );
        let reader = p.key(Some(&principal(&["tools:read"], &Value::Null)));
        assert!(p.allows(&reader, "demo", ItemKind::Tool, "echo"));
        assert!(!p.allows(&reader, "demo", ItemKind::Tool, "add"));
        assert!(!p.allows(&reader, "demo", ItemKind::Prompt, "greet"));
        assert!(!p.allows(&reader, "other", ItemKind::Tool, "echo"));
        let admin = p.key(Some(&principal(&["tools:admin"], &Value::Null)));
        assert!(p.allows(&admin, "demo", ItemKind::Tool, "add"));
        assert!(p.allows(&admin, "demo", ItemKind::Resource, "test://x"));
        let contractor = p.key(Some(&principal(
            &["tools:admin"],
            &serde_json::json!({"groups": ["dev", "contractors"]}),
        )));
        assert!(!p.allows(&contractor, "demo", ItemKind::Tool, "delete_all"));
        assert!(p.allows(&contractor, "demo", ItemKind::Tool, "add"));
        assert_ne!(reader, admin);
        assert_eq!(
            reader,
            p.key(Some(&principal(&["tools:read", "other"], &Value::Null)))
        );
        let anonymous = p.key(None);
        assert!(!p.allows(&anonymous, "demo", ItemKind::Tool, "echo"));
    }
}
