//! The config JSON Schema (`mcpgate config-schema`): the shipped copy matches the
//! code, `config/examples/full.toml` names exactly the options the schema knows, and
//! the duration pattern lists only units that the parser accepts.
//!
//! Refresh the shipped schema after changing a config type:
//! `cargo run -- config-schema > config/mcpgate.schema.json`
//! (or `MCPGATE_BLESS=1 cargo test --test config_schema`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SHIPPED: &str = "config/mcpgate.schema.json";
const FULL_EXAMPLE: &str = "config/examples/full.toml";

fn generated() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("config-schema")
        .output()
        .expect("run mcpgate config-schema");
    assert!(out.status.success(), "mcpgate config-schema: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 schema")
}

fn schema() -> Value {
    serde_json::from_str(&generated()).expect("config-schema prints JSON")
}

#[test]
fn shipped_schema_matches_the_code() {
    let now = generated();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SHIPPED);
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    if shipped == now {
        return;
    }
    if std::env::var_os("MCPGATE_BLESS").is_some() {
        std::fs::write(&path, &now).expect("write the schema");
        return;
    }
    panic!(
        "{SHIPPED} differs from `mcpgate config-schema` (a config type changed). Refresh it:\n  \
         cargo run -- config-schema > {SHIPPED}\n(or MCPGATE_BLESS=1 cargo test --test config_schema)"
    );
}

/// The schemas `schema` stands for: itself, its `$ref` target and the branches of
/// `allOf` / `anyOf` / `oneOf`, recursively.
fn branches<'a>(root: &'a Value, schema: &'a Value, out: &mut Vec<&'a Value>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/definitions/").expect("local $ref");
        branches(root, &root["definitions"][name], out);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for s in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            branches(root, s, out);
        }
    }
    out.push(schema);
}

/// What a table in the file may hold, per the schema.
#[derive(Default)]
struct TableShape<'a> {
    /// Named keys (options).
    properties: BTreeMap<&'a str, &'a Value>,
    /// Tables of options under names the user picks (`backends.NAME`), shown as `*`.
    named_tables: Option<&'a Value>,
    /// Keys the user picks whose values are data, not options (`env`, `headers`).
    free: bool,
    /// Array elements with options of their own (`[[policy.rules]]`), shown as `[]`.
    items: Option<&'a Value>,
}

fn shape<'a>(root: &'a Value, schema: &'a Value) -> TableShape<'a> {
    let mut all = Vec::new();
    branches(root, schema, &mut all);
    let mut shape = TableShape::default();
    for b in all {
        for (k, s) in b
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            shape.properties.insert(k, s);
        }
        match b.get("additionalProperties") {
            Some(Value::Bool(true)) => shape.free = true,
            Some(ap @ Value::Object(_)) if has_options(root, ap) => shape.named_tables = Some(ap),
            Some(Value::Object(_)) => shape.free = true,
            _ => {}
        }
        if let Some(items) = b.get("items").filter(|i| has_options(root, i)) {
            shape.items = Some(items);
        }
    }
    shape
}

fn has_options(root: &Value, schema: &Value) -> bool {
    let mut all = Vec::new();
    branches(root, schema, &mut all);
    all.iter().any(|b| b.get("properties").is_some())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Every option path the schema knows (`server.listen`, `backends.*.tools.include`,
/// `policy.rules[].effect` …).
fn schema_options(root: &Value, schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    let shape = shape(root, schema);
    for (k, s) in shape.properties {
        let p = join(path, k);
        out.insert(p.clone());
        schema_options(root, s, &p, out);
    }
    if let Some(t) = shape.named_tables {
        schema_options(root, t, &join(path, "*"), out);
    }
    if let Some(items) = shape.items {
        schema_options(root, items, &format!("{path}[]"), out);
    }
}

/// Every option path used in a TOML value, in the notation of [`schema_options`];
/// keys the schema does not know go to `unknown`.
fn file_options(
    root: &Value,
    schema: &Value,
    value: &toml::Value,
    path: &str,
    out: &mut BTreeSet<String>,
    unknown: &mut BTreeSet<String>,
) {
    let shape = shape(root, schema);
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                if let Some(s) = shape.properties.get(k.as_str()) {
                    let p = join(path, k);
                    out.insert(p.clone());
                    file_options(root, s, v, &p, out, unknown);
                } else if let Some(s) = shape.named_tables {
                    file_options(root, s, v, &join(path, "*"), out, unknown);
                } else if !shape.free {
                    unknown.insert(join(path, k));
                }
            }
        }
        toml::Value::Array(items) => {
            if let Some(s) = shape.items {
                for item in items {
                    file_options(root, s, item, &format!("{path}[]"), out, unknown);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn full_example_lists_every_option() {
    let root = schema();
    let mut known = BTreeSet::new();
    schema_options(&root, &root, "", &mut known);
    assert!(known.contains("server.listen") && known.contains("policy.rules[].effect"));

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FULL_EXAMPLE);
    let text = std::fs::read_to_string(&path).expect("read full.toml");
    let file: toml::Value = toml::from_str(&text).expect("full.toml is TOML");
    let (mut used, mut unknown) = (BTreeSet::new(), BTreeSet::new());
    file_options(&root, &root, &file, "", &mut used, &mut unknown);

    let missing: Vec<_> = known.difference(&used).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{FULL_EXAMPLE} must set every option of the schema, and only those.\n\
         missing from {FULL_EXAMPLE} (add them, uncommented, with a comment): {missing:?}\n\
         in {FULL_EXAMPLE} but not in the schema: {unknown:?}"
    );
}

#[test]
fn duration_pattern_lists_only_units_the_parser_accepts() {
    type Durations = BTreeMap<String, humantime_serde::Serde<std::time::Duration>>;
    let root = schema();
    let pattern = root["definitions"]["ServerConfig"]["properties"]["request_timeout"]["pattern"]
        .as_str()
        .expect("durations have a pattern")
        .to_string();
    let units = pattern
        .split(['(', ')'])
        .find(|group| group.contains('|') && !group.contains('$'))
        .expect("a (unit|unit…) group");
    let units: Vec<_> = units.split('|').collect();
    assert!(units.len() > 20, "{units:?}");
    for unit in units {
        let text = format!("d = \"2{unit}\"");
        if let Err(e) = toml::from_str::<Durations>(&text) {
            panic!("the schema allows {text:?}, the parser does not: {e}");
        }
    }
}
