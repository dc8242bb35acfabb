//! Import of the `mcpServers` JSON format used by Claude Desktop, Cursor and VS Code.
//!
//! Shape: `{"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"url", "headers",
//! "type"}}}`; VS Code's `{"servers": {…}}` is accepted too. Entries with
//! `"disabled": true` are skipped. Names that are not valid backend names are made
//! valid (`.`, spaces and other characters become `-`).

use serde::Deserialize;
use serde_json::Value;

use super::ConfigProblem;

#[derive(Deserialize)]
struct File {
    #[serde(rename = "mcpServers", alias = "servers")]
    servers: serde_json::Map<String, Value>,
}

/// Converts an `mcpServers` JSON document into the TOML tree of an equivalent
/// `mcpgate` config (`[backends.NAME]` tables), ready for interpolation.
pub(super) fn to_toml_value(text: &str) -> Result<toml::Value, Vec<ConfigProblem>> {
    let file: File = serde_json::from_str(text).map_err(|e| {
        vec![ConfigProblem::new(
            "",
            format!("not an mcpServers JSON file: {e}"),
        )]
    })?;
    let mut problems = Vec::new();
    let mut backends = toml::map::Map::new();
    for (name, entry) in file.servers {
        let at = |f: &str| format!("mcpServers.{name}{f}");
        let Value::Object(entry) = entry else {
            problems.push(ConfigProblem::new(at(""), "must be an object"));
            continue;
        };
        if entry.get("disabled") == Some(&Value::Bool(true)) {
            continue;
        }
        let mut t = toml::map::Map::new();
        let kind = entry.get("type").and_then(Value::as_str);
        let remote = entry.contains_key("url") || entry.contains_key("serverUrl");
        if remote && entry.contains_key("command") {
            problems.push(ConfigProblem::new(
                at(""),
                "has both \"command\" and \"url\"; keep the one you mean",
            ));
            continue;
        }
        if let Some(url) = entry.get("url").or_else(|| entry.get("serverUrl")) {
            let kind = if kind == Some("sse") { "sse" } else { "http" };
            t.insert("type".into(), kind.into());
            t.insert("url".into(), json_to_toml(url));
            if let Some(h) = entry.get("headers") {
                t.insert("headers".into(), json_to_toml(h));
            }
        } else if let Some(cmd) = entry.get("command") {
            t.insert("type".into(), "stdio".into());
            t.insert("command".into(), json_to_toml(cmd));
            for key in ["args", "env", "cwd"] {
                if let Some(v) = entry.get(key) {
                    t.insert(key.into(), json_to_toml(v));
                }
            }
        } else {
            problems.push(ConfigProblem::new(at(""), "needs \"command\" or \"url\""));
            continue;
        }
        let backend = backend_name(&name);
        if backends.contains_key(&backend) {
            problems.push(ConfigProblem::new(
                at(""),
                format!("name collides with another server as {backend:?}"),
            ));
            continue;
        }
        if backend != name {
            tracing::info!(server = %name, backend = %backend, "mcpServers entry renamed to a valid backend name");
        }
        backends.insert(backend, toml::Value::Table(t));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut root = toml::map::Map::new();
    root.insert("backends".into(), toml::Value::Table(backends));
    Ok(toml::Value::Table(root))
}

/// Maps a free-form server name to a valid backend name.
fn backend_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            c
        } else {
            '-'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let trimmed = out.trim_end_matches('_');
    let mut out = trimmed.to_string();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 's');
    }
    out.truncate(64);
    out
}

fn json_to_toml(v: &Value) -> toml::Value {
    match v {
        Value::Null => toml::Value::String(String::new()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => n
            .as_i64()
            .map(toml::Value::Integer)
            .or_else(|| n.as_f64().map(toml::Value::Float))
            .unwrap_or_else(|| toml::Value::String(n.to_string())),
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().map(json_to_toml).collect()),
        Value::Object(o) => toml::Value::Table(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_toml(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Config, Transport};
    use super::*;

    /// An entry with both keys must not be silently served as HTTP, and
    /// editor placeholders get more than a bare "invalid variable name".
    #[test]
    fn ambiguous_entries_and_editor_placeholders_are_explained() {
        let problems = |text: &str| -> Vec<String> {
            let e = Config::parse(text, Path::new("mcp.json"), &|_| None).unwrap_err();
            e.iter().map(|p| p.to_string()).collect()
        };
        let text = problems(
            r#"{"mcpServers": {"both": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}}"#,
        );
        assert!(
            text.iter().any(
                |p| p.contains("mcpServers.both") && p.contains("both \"command\" and \"url\"")
            ),
            "{text:?}"
        );
        let text = problems(r#"{"mcpServers": {"vscode": {"command": "${workspaceFolder}/run"}}}"#);
        assert!(
            text.iter().any(|p| p.contains("editor placeholder")),
            "{text:?}"
        );
    }

    #[test]
    fn imports_claude_desktop_file() {
        let text = r#"{
          "mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
            "remote.api": {"url": "https://api.example/mcp", "headers": {"X-Key": "${KEY}"}},
            "off": {"command": "x", "disabled": true}
          }
        }"#;
        let env = |n: &str| (n == "KEY").then(|| "k".to_string());
        let c = Config::parse(text, Path::new("claude.json"), &env).unwrap();
        assert_eq!(c.backends.len(), 2);
        assert!(matches!(
            c.backends["time"].transport,
            Transport::Stdio { .. }
        ));
        match &c.backends["remote-api"].transport {
            Transport::Http { url, headers } => {
                assert_eq!(url, "https://api.example/mcp");
                assert_eq!(headers["X-Key"], "k");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn vscode_servers_key_and_bad_entries() {
        let ok = r#"{"servers": {"a": {"type": "stdio", "command": "x"}}}"#;
        assert!(Config::parse(ok, Path::new("mcp.json"), &|_| None).is_ok());
        let bad = r#"{"mcpServers": {"a": {"args": []}, "b": 3}}"#;
        let p = Config::parse(bad, Path::new("mcp.json"), &|_| None).unwrap_err();
        assert_eq!(p.len(), 2, "{p:?}");
    }

    #[test]
    fn names_become_valid() {
        assert_eq!(backend_name("my server.v2"), "my-server-v2");
        assert_eq!(backend_name("1st"), "s1st");
        assert_eq!(backend_name("a__b_"), "a_b");
    }
}
