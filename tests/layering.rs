//! The layering of docs/architecture.md, checked against the real imports: every
//! `crate::X` path in a module's non-test code names a module on a lower layer
//! (or the module itself). A new upward import fails here, with the line.

use std::collections::BTreeMap;
use std::path::Path;

/// Lowest first. Modules on one layer may not import each other.
const LAYERS: &[&[&str]] = &[
    &["metrics", "logging", "jsonrpc", "memory"],
    &["mcp"],
    &["streamable_http"],
    &["config"],
    &["auth", "cluster", "telemetry"],
    &["backend"],
    &["error", "catalog", "session"],
    &["request", "relay"],
    &["supervisor"],
    &["dispatch"],
    &["http"],
    &["lib", "reload", "fuzzing"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level module a source file belongs to (`src/http/mcp.rs` → `http`).
fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `crate::X` module names used in `code` with their line numbers.
fn imports(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                found.push((n + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn every_import_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = module_of(rel);
        // The binary's modules (main.rs, demo/) use the library by its name, and
        // test-only files are not part of the layering.
        if module == "main" || module == "demo" || rel.ends_with("tests.rs") {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            problems.push(format!("{}: module {module} is on no layer", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        for (line, used) in imports(code) {
            *seen.entry(module.clone()).or_default() += 1;
            if used == module {
                continue;
            }
            let Some(theirs) = layer_of(&used) else {
                problems.push(format!(
                    "{}:{line}: crate::{used} is on no layer",
                    rel.display()
                ));
                continue;
            };
            if theirs >= own {
                problems.push(format!(
                    "{}:{line}: {module} (layer {own}) imports crate::{used} (layer {theirs})",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "upward or sideways imports:\n{}",
        problems.join("\n")
    );
    // The scan found the imports it is meant to check.
    assert!(seen.get("http").copied().unwrap_or(0) > 20, "{seen:?}");
    assert!(seen.get("backend").copied().unwrap_or(0) > 5, "{seen:?}");
}
