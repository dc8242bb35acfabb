//! Unit tests of config loading, parsing and validation.

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "MCPGATE_EXE" => Some("/usr/bin/mcpgate".into()),
        "API_KEY" => Some("k1".into()),
        _ => None,
    }
}

#[test]
fn every_file_in_config_parses() {
    let mut seen = 0;
    for dir in ["config", "config/examples"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // The JSON Schema of the config (tests/config_schema.rs checks it).
            if path.to_string_lossy().ends_with(".schema.json") {
                continue;
            }
            if !matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("toml" | "json")
            ) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let env =
                |n: &str| env(n).or_else(|| (!n.starts_with("MCPGATE_")).then(|| format!("v-{n}")));
            // The full example names a mounted secret that is not here.
            let absent_secret = |p: &ConfigProblem| {
                p.path == "cluster.session_keys_file" && p.message.starts_with("cannot read")
            };
            if let Err(p) = Config::parse(&text, &path, &env)
                && !p.iter().all(absent_secret)
            {
                panic!("{}: {p:?}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen >= 1, "no config files found");
}

#[test]
fn defaults_and_modes() {
    let c = Config::parse(
        r#"
        [backends.a]
        type = "stdio"
        command = "x"
        [backends.b]
        type = "http"
        url = "http://127.0.0.1:1/mcp"
        prefix = ""
        "#,
        Path::new("c.toml"),
        &env,
    )
    .unwrap();
    assert_eq!(c.server.path, "/mcp");
    assert_eq!(c.backends["a"].mode(), ConnectionMode::Auto);
    assert_eq!(c.backends["b"].mode(), ConnectionMode::PerSession);
    assert_eq!(c.backends["a"].prefix("a"), "a");
    assert_eq!(c.backends["b"].prefix("b"), "");
    assert_eq!(c.backends["a"].era, BackendEra::Auto);
}

#[test]
fn era_per_backend() {
    let c = Config::parse(
        r#"
        [backends.a]
        type = "stdio"
        command = "x"
        era = "modern"
        [backends.b]
        type = "http"
        url = "http://127.0.0.1:1/mcp"
        era = "legacy"
        "#,
        Path::new("c.toml"),
        &env,
    )
    .unwrap();
    assert_eq!(c.backends["a"].era, BackendEra::Modern);
    assert_eq!(c.backends["b"].era, BackendEra::Legacy);
    let bad = "[backends.s]\ntype = \"sse\"\nurl = \"http://127.0.0.1:1/sse\"\nera = \"modern\"\n";
    let err = Config::parse(bad, Path::new("c.toml"), &env).unwrap_err();
    assert!(format!("{err:?}").contains("backends.s.era"), "{err:?}");
}

#[test]
fn listen_override() {
    let env = |n: &str| (n == "MCPGATE_LISTEN").then(|| "127.0.0.1:9999".to_string());
    let c = Config::parse("", Path::new("c.toml"), &env).unwrap();
    assert_eq!(c.server.listen.port(), 9999);
}

#[test]
fn a_clients_session_share_defaults_to_a_quarter_of_the_cap_at_least_100() {
    let parse = |text: &str| Config::parse(text, std::path::Path::new("t.toml"), &env);
    let c = parse("[server]\nmax_sessions = 1001\n").expect("valid");
    assert_eq!(c.server.sessions_per_client(), 251, "1001 / 4, rounded up");
    let c = parse("[server]\nmax_sessions = 200\n").expect("valid");
    assert_eq!(c.server.sessions_per_client(), 100, "at least 100");
    let c = parse("[server]\nmax_sessions = 10\n").expect("valid");
    assert_eq!(
        c.server.sessions_per_client(),
        10,
        "a small cap is not split"
    );
    let c = parse("[server]\nmax_sessions_per_client = 7\n").expect("valid");
    assert_eq!(c.server.sessions_per_client(), 7);
    let problems = parse("[server]\nmax_sessions_per_client = 0\n").expect_err("0");
    assert!(
        problems
            .iter()
            .any(|p| p.path == "server.max_sessions_per_client"),
        "{problems:?}"
    );
}
