//! The authorization policy (`[policy]`): which backends, tools, prompts and
//! resources exist for a caller. What a caller may not call is also not listed,
//! so a refused name and an absent one look the same to a host.
//!
//! A principal maps to a [`ViewKey`]: the set of rules whose `scopes` and
//! `claims` it satisfies. Everything else depends only on the key, so the router
//! builds one filtered catalogue per key and reuses it for every caller with the
//! same key. For an item, a matching `deny` rule wins, then a matching `allow`;
//! an item no applicable rule matches gets the policy's `default`.

use std::collections::BTreeMap;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::Principal;
use crate::config::{Effect, EndpointConfig, PolicyConfig, RuleConfig};

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

/// The rules that apply to a principal at one endpoint, by index into the policy of
/// one generation (a reload compiles a new generation); equal keys see equal views.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ViewKey {
    generation: u64,
    /// 0: the whole gateway (no `[endpoints]`); `i + 1`: the `i`-th endpoint by
    /// name; [`NO_ENDPOINT`]: a name this generation does not have (sees nothing).
    endpoint: u16,
    rules: Arc<[u32]>,
}

/// The endpoint index of a name the policy does not know.
const NO_ENDPOINT: u16 = u16::MAX;

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

/// What one virtual endpoint (`[endpoints.NAME]`) serves: its backends and tools.
struct Endpoint {
    name: String,
    backends: GlobSet,
    tools: Option<GlobSet>,
    exclude_tools: GlobSet,
}

impl Endpoint {
    fn new(name: &str, e: &EndpointConfig) -> Endpoint {
        Endpoint {
            name: name.to_owned(),
            backends: globs(e.backends.as_deref().unwrap_or(&["*".to_string()])),
            tools: e.tools.as_deref().map(globs),
            exclude_tools: globs(&e.exclude_tools),
        }
    }

    fn serves(&self, backend: &str, kind: ItemKind, name: &str) -> bool {
        self.backends.is_match(backend)
            && (kind != ItemKind::Tool
                || (self.tools.as_ref().is_none_or(|t| t.is_match(name))
                    && !self.exclude_tools.is_match(name)))
    }
}

/// The compiled policy: the rules, and the endpoints' own filters.
pub struct Policy {
    generation: u64,
    default: Effect,
    rules: Vec<Rule>,
    endpoints: Vec<Endpoint>,
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
    /// Compiles `[policy]` (generation 0) for a gateway without `[endpoints]`.
    #[cfg(test)]
    pub fn new(config: &PolicyConfig) -> Policy {
        Self::compile(config, &BTreeMap::new(), 0)
    }

    /// Compiles `[policy]` and the endpoints' filters as generation `generation`:
    /// its keys never equal the keys of another generation.
    pub fn compile(
        config: &PolicyConfig,
        endpoints: &BTreeMap<String, EndpointConfig>,
        generation: u64,
    ) -> Policy {
        Policy {
            generation,
            default: config.default,
            rules: config.rules.iter().map(Rule::new).collect(),
            endpoints: endpoints.iter().map(|(n, e)| Endpoint::new(n, e)).collect(),
        }
    }

    /// This policy's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a caller with `key` sees everything (no rules, default allow, the
    /// whole gateway's endpoint): the catalogue then serves the one aggregated view.
    pub fn is_open_for(&self, key: &ViewKey) -> bool {
        self.rules.is_empty()
            && self.default == Effect::Allow
            && key.endpoint == 0
            && key.generation == self.generation
    }

    /// The names of the endpoints (`[endpoints.NAME]`), in order.
    pub fn endpoint_names(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.name.as_str()).collect()
    }

    /// The view key of a principal (`None`: unauthenticated) on the whole gateway.
    #[cfg(test)]
    pub fn key(&self, p: Option<&Principal>) -> ViewKey {
        self.key_at("", p)
    }

    /// The view key of a principal at endpoint `endpoint` (`[endpoints.NAME]`;
    /// `""`: the whole gateway, when no endpoints are configured). An endpoint
    /// this generation does not have sees nothing: a request that began before a
    /// reload removed its endpoint (or configured the first ones) is shown
    /// nothing rather than the whole gateway.
    pub fn key_at(&self, endpoint: &str, p: Option<&Principal>) -> ViewKey {
        let applicable: Vec<u32> = (0..self.rules.len() as u32)
            .filter(|i| self.rules[*i as usize].applies(p))
            .collect();
        let endpoint = match endpoint {
            "" if self.endpoints.is_empty() => 0,
            name => self
                .endpoints
                .iter()
                .position(|e| e.name == name)
                .and_then(|i| u16::try_from(i + 1).ok())
                .unwrap_or(NO_ENDPOINT),
        };
        ViewKey {
            generation: self.generation,
            endpoint,
            rules: applicable.into(),
        }
    }

    /// Whether an item is visible under `key`. A key of another generation
    /// sees nothing (its rule indices mean other rules here).
    pub fn allows(&self, key: &ViewKey, backend: &str, kind: ItemKind, name: &str) -> bool {
        if key.generation != self.generation {
            return false;
        }
        if key.endpoint != 0 {
            let at = self.endpoints.get(usize::from(key.endpoint) - 1);
            if !at.is_some_and(|e| e.serves(backend, kind, name)) {
                return false;
            }
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
        assert!(p.is_open_for(&p.key(None)));
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

    #[test]
    fn endpoints_narrow_what_the_rules_allow() {
        let endpoints: BTreeMap<String, EndpointConfig> = toml::from_str(
            r#"
            [eng]
            path = "/mcp/eng"
            backends = ["demo"]
            exclude_tools = ["delete_*"]
            [ops]
            path = "/mcp/ops"
            tools = ["status"]
            "#,
        )
        .unwrap();
        let rules: PolicyConfig = toml::from_str(
            r#"
            [[rules]]
            effect = "deny"
            tools = ["secret"]
            "#,
        )
        .unwrap();
        let p = Policy::compile(&rules, &endpoints, 3);
        let (eng, ops) = (p.key_at("eng", None), p.key_at("ops", None));
        assert!(p.allows(&eng, "demo", ItemKind::Tool, "echo"));
        assert!(!p.allows(&eng, "demo", ItemKind::Tool, "delete_all"));
        assert!(
            !p.allows(&eng, "demo", ItemKind::Tool, "secret"),
            "rules still apply"
        );
        assert!(!p.allows(&eng, "other", ItemKind::Tool, "echo"));
        assert!(!p.allows(&eng, "other", ItemKind::Prompt, "greet"));
        assert!(p.allows(&ops, "other", ItemKind::Tool, "status"));
        assert!(!p.allows(&ops, "other", ItemKind::Tool, "echo"));
        assert!(
            p.allows(&ops, "other", ItemKind::Prompt, "greet"),
            "tools only"
        );
        assert!(!p.allows(&p.key_at("gone", None), "demo", ItemKind::Tool, "echo"));
        assert_ne!(eng, ops);
        assert!(!p.is_open_for(&eng));
        let open = Policy::compile(&PolicyConfig::default(), &endpoints, 0);
        assert!(!open.is_open_for(&open.key_at("eng", None)));
        // With endpoints, "" (server.path) is no endpoint: a request that began
        // before a reload configured them sees nothing, not the whole gateway.
        let whole = open.key(None);
        assert!(!open.is_open_for(&whole));
        assert!(!open.allows(&whole, "demo", ItemKind::Tool, "echo"));
        let none = Policy::compile(&PolicyConfig::default(), &BTreeMap::new(), 0);
        assert!(none.is_open_for(&none.key(None)));
    }
}
