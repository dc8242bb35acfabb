//! The JSON Schema of the TOML config file (`mcpgate config-schema`, shipped as
//! `config/mcpgate.schema.json` for editors such as taplo).
//!
//! Derived with `schemars` from the types the file is deserialized into; the
//! functions below describe the fields whose TOML form differs from their Rust type.
//! Every string may contain `${VAR}` (interpolated before the file is
//! deserialized), so the string patterns below also accept any string with `${`.

use schemars::transform::RecursiveTransform;
use schemars::{Schema, SchemaGenerator, json_schema};

/// The JSON Schema (draft 7, which taplo and most editors read) of an `mcpgate` TOML
/// config file, as a JSON value. The `mcpServers` JSON import format is not covered.
pub fn json_schema() -> serde_json::Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    // Before draft 7's own transforms, so that `$ref` siblings are still rewritten.
    settings.transforms.insert(
        0,
        Box::new(RecursiveTransform(drop_null as fn(&mut Schema))),
    );
    let schema = settings
        .into_generator()
        .into_root_schema_for::<super::RawConfig>();
    // `$schema`, title and description first, for people reading the file.
    let mut rest = match schema.to_value() {
        serde_json::Value::Object(o) => o,
        other => return other,
    };
    let mut out = serde_json::Map::new();
    out.extend(rest.remove_entry("$schema"));
    out.insert("title".into(), "mcpgate configuration".into());
    rest.remove("title");
    out.extend(rest.remove_entry("description"));
    out.extend(rest);
    serde_json::Value::Object(out)
}

/// TOML has no null, so `Option` fields are only ever absent: removes the `null`
/// alternative that `schemars` adds to them.
fn drop_null(schema: &mut Schema) {
    if let Some(serde_json::Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema.insert("type".into(), only);
        }
    }
    let Some(serde_json::Value::Array(any_of)) = schema.get_mut("anyOf") else {
        return;
    };
    any_of.retain(|s| s.get("type").is_none_or(|t| t != "null"));
    if let [serde_json::Value::Object(only)] = any_of.as_slice() {
        let only = only.clone();
        schema.remove("anyOf");
        for (k, v) in only {
            schema.insert(k, v);
        }
    }
}

/// Units of a `humantime` duration (humantime 2.x `parse_duration`).
const DURATION_UNITS: &str = "nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y";

/// A duration: a `humantime` string such as `"30s"`, `"1m 30s"` or `"100ms"`.
pub(super) fn duration(_: &mut SchemaGenerator) -> Schema {
    let pattern = format!(r"^\s*([0-9]+(\.[0-9]+)?\s*({DURATION_UNITS})\s*)+$|\$\{{");
    json_schema!({
        "type": "string",
        "pattern": pattern,
        "examples": ["30s", "1m 30s", "100ms"],
    })
}

/// A socket address `IP:PORT` (`[IPv6]:PORT`); host names are not accepted.
pub(super) fn socket_addr(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": ADDR_PATTERN,
        "examples": ["127.0.0.1:8080", "0.0.0.0:8080", "[::1]:8080"],
    })
}

/// `metrics_listen`: a socket address, or `"off"` (or `""`) for no listener.
pub(super) fn optional_socket_addr(_: &mut SchemaGenerator) -> Schema {
    let pattern = format!(r"^\s*(off)?\s*$|{ADDR_PATTERN}");
    json_schema!({
        "type": "string",
        "pattern": pattern,
        "examples": ["127.0.0.1:9464", "off"],
    })
}

/// `IPv4:PORT` or `[IPv6]:PORT`, as `std::net::SocketAddr` parses them; or a `${VAR}`.
const ADDR_PATTERN: &str =
    r"^([0-9]{1,3}(\.[0-9]{1,3}){3}|\[[0-9A-Fa-f:.]+(%[0-9]+)?\]):[0-9]{1,5}$|\$\{";
