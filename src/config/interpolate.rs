//! `${VAR}` interpolation in every string value of the parsed config tree.

use super::ConfigProblem;

/// Replaces `${NAME}` in every string of `value` with `env(NAME)`; `$${` yields a
/// literal `${`. A missing variable is a problem tagged with the field path.
pub(super) fn interpolate(
    value: &mut toml::Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<ConfigProblem>,
) {
    match value {
        toml::Value::String(s) if s.contains('$') => match expand(s, env) {
            Ok(out) => *s = out,
            Err(message) => problems.push(ConfigProblem::new(path, message)),
        },
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, &format!("{path}[{i}]"), env, problems);
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                interpolate(item, &child, env, problems);
            }
        }
        _ => {}
    }
}

fn expand(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| format!("unterminated ${{ in {s:?}"))?;
            let name = &tail[..end];
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                let hint = editor_hint(name);
                return Err(format!("invalid variable name {name:?}{hint}"));
            }
            let v = env(name).ok_or_else(|| {
                let hint = editor_hint(name);
                format!("environment variable {name} is not set{hint}")
            })?;
            out.push_str(&v);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A hint when `name` looks like a VS Code / Cursor placeholder (`${env:X}`,
/// `${input:x}`, `${workspaceFolder}`), which only those editors expand.
fn editor_hint(name: &str) -> &'static str {
    let editor = name.contains(':')
        || matches!(
            name,
            "workspaceFolder" | "workspaceFolderBasename" | "userHome" | "pathSeparator"
        );
    if editor {
        " (an editor placeholder; mcpgate reads only ${NAME} from the environment)"
    } else {
        ""
    }
}

/// Sets `[server] key` in the raw file (an `MCPGATE_*` override).
pub(super) fn set_server_field(value: &mut toml::Value, key: &str, v: toml::Value) {
    if let toml::Value::Table(root) = value {
        let server = root
            .entry("server")
            .or_insert_with(|| toml::Value::Table(Default::default()));
        if let toml::Value::Table(t) = server {
            t.insert(key.into(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(n: &str) -> Option<String> {
        (n == "A").then(|| "x".to_string())
    }

    #[test]
    fn expands_and_escapes() {
        assert_eq!(expand("a${A}b", &env).unwrap(), "axb");
        assert_eq!(expand("$${A}", &env).unwrap(), "${A}");
        assert_eq!(expand("cost $5", &env).unwrap(), "cost $5");
        assert!(expand("${B}", &env).unwrap_err().contains("B is not set"));
        assert!(expand("${A", &env).is_err());
        assert!(expand("${1A}", &env).is_err());
    }

    #[test]
    fn reports_paths() {
        let mut v: toml::Value =
            toml::from_str("[backends.x]\nargs = [\"ok\", \"${NOPE}\"]").unwrap();
        let mut problems = Vec::new();
        interpolate(&mut v, "", &env, &mut problems);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, "backends.x.args[1]");
    }
}
