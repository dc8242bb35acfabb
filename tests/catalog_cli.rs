//! `mcpgate catalog`: what a principal is shown, from the config alone. The CLI
//! runs as its own process with the real backends; what it prints for a
//! principal's claims equals what a running gateway lists to a host holding a
//! token with those claims, and it names what the policy hid.

mod auth_support;
mod common;

use std::process::Command;

use auth_support::{Backend, Host, Issuer, gateway};
use common::TestDir;
use serde_json::{Value, json};

const MCPGATE: &str = env!("CARGO_BIN_EXE_mcpgate");
const RESOURCE: &str = "https://gw.example.test/mcp";

fn config(issuer: &Issuer, backend: &Backend) -> String {
    format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        admin_endpoints = true
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        [policy]
        default = "deny"
        [[policy.rules]]
        scopes = ["tools:read"]
        backends = ["rec"]
        tools = ["echo"]
        [[policy.rules]]
        scopes = ["tools:admin"]
        backends = ["rec"]
        [backends.rec]
        type = "http"
        url = "{}"
        "#,
        issuer.url, backend.url
    )
}

/// `mcpgate catalog --json` for `claims`; its stdout as JSON.
fn catalog(config_file: &std::path::Path, claims: Option<&Value>) -> Value {
    let claims = claims.map(Value::to_string);
    let args: Vec<&str> = claims
        .iter()
        .flat_map(|c| ["--claims", c.as_str()])
        .collect();
    catalog_with(config_file, &args)
}

/// `mcpgate catalog --json ARGS…`; its stdout as JSON (panics if it failed).
fn catalog_with(config_file: &std::path::Path, args: &[&str]) -> Value {
    let out = catalog_run(config_file, args);
    assert!(
        out.status.success(),
        "mcpgate catalog failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Runs `mcpgate catalog --json --wait 10 --config FILE ARGS…`.
fn catalog_run(config_file: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(MCPGATE)
        .args(["catalog", "--json", "--wait", "10", "--config"])
        .arg(config_file)
        .args(args)
        .env_remove("MCPGATE_CONFIG")
        .output()
        .expect("run mcpgate catalog")
}

/// `GET /admin/catalog?claims=…` on the gateway's metrics listener.
async fn admin_catalog(gw: &mcpgate::Gateway, claims: &Value) -> Value {
    let addr = gw.metrics_addr.expect("metrics listener");
    let mut url = url::Url::parse(&format!("http://{addr}/admin/catalog")).unwrap();
    url.query_pairs_mut()
        .append_pair("claims", &claims.to_string());
    let resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status(), 200);
    serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
}

fn without_backend(items: &Value) -> Vec<Value> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let mut i = i.clone();
            assert_eq!(i["backend"], "rec", "{i}");
            i.as_object_mut().unwrap().remove("backend");
            i
        })
        .collect()
}

#[tokio::test]
async fn a_principals_catalog_equals_what_tools_list_returns_to_it() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let toml = config(&issuer, &backend);
    let dir = TestDir::new();
    let file = dir.path("gw.toml");
    std::fs::write(&file, &toml).unwrap();

    let gw = gateway(&toml).await;
    let host = Host::new(&gw);
    for (sub, scope, visible) in [
        ("alice", "tools:read", vec!["rec__echo"]),
        (
            "bob",
            "tools:admin",
            vec![
                "rec__add",
                "rec__delete_all",
                "rec__echo",
                "rec__file_ticket",
            ],
        ),
    ] {
        let claims = issuer.claims(sub, scope, RESOURCE);
        let token = issuer.mint(&claims);
        let session = host.initialize(Some(&token)).await;
        let listed = host
            .rpc(Some(&token), &session, "tools/list", json!({}))
            .await;
        let seen = tokio::task::spawn_blocking({
            let (file, claims) = (file.clone(), claims.clone());
            move || catalog(&file, Some(&claims))
        })
        .await
        .unwrap();
        assert_eq!(
            without_backend(&seen["tools"]),
            listed["result"]["tools"].as_array().unwrap().clone(),
            "{sub}: the CLI shows what tools/list returns"
        );
        assert_eq!(
            admin_catalog(&gw, &claims).await,
            seen,
            "{sub}: /admin/catalog shows what the CLI prints"
        );
        // A real token is verified as a host's is, then described the same.
        let by_token = tokio::task::spawn_blocking({
            let (file, token) = (file.clone(), token.clone());
            move || catalog_with(&file, &["--token", &token])
        })
        .await
        .unwrap();
        assert_eq!(by_token, seen, "{sub}: --token shows what --claims shows");
        let mut names: Vec<&str> = seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        assert_eq!(names, visible, "{sub}");
        let hidden = seen["hidden"]["tools"].as_array().unwrap();
        assert_eq!(hidden.len(), 4 - visible.len(), "{sub}: {hidden:?}");
    }
    // No claims: an unauthenticated host is shown nothing under default = "deny".
    let seen = tokio::task::spawn_blocking(move || catalog(&file, None))
        .await
        .unwrap();
    assert_eq!(seen["tools"], json!([]), "{seen}");
    assert_eq!(seen["hidden"]["tools"].as_array().unwrap().len(), 4);
}

#[test]
fn claims_that_are_not_an_object_or_lack_a_subject_are_refused() {
    let dir = TestDir::new();
    let file = dir.path("gw.toml");
    std::fs::write(&file, "").unwrap();
    for (claims, needle) in [
        ("[1]", "must be a JSON object"),
        ("{not json", "is not JSON"),
        (r#"{"iss": "https://idp.example"}"#, "\"sub\""),
        (r#"{"sub": "alice"}"#, "\"iss\""),
    ] {
        let out = Command::new(MCPGATE)
            .args(["catalog", "--wait", "1", "--claims", claims, "--config"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{claims}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{claims}: {err}");
    }
}

#[tokio::test]
async fn a_token_the_gateway_would_refuse_is_refused() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let dir = TestDir::new();
    let file = dir.path("gw.toml");
    std::fs::write(&file, config(&issuer, &backend)).unwrap();
    let other_audience =
        issuer.mint(&issuer.claims("alice", "tools:read", "https://other.test/mcp"));
    let expired = {
        let mut c = issuer.claims("alice", "tools:read", RESOURCE);
        c["exp"] = json!(1);
        issuer.mint(&c)
    };
    for (token, needle) in [
        (other_audience, "refused"),
        (expired, "refused"),
        ("garbage".into(), "refused"),
    ] {
        let out = tokio::task::spawn_blocking({
            let file = file.clone();
            move || catalog_run(&file, &["--token", &token])
        })
        .await
        .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
    }
    // Without [auth] there is nothing to verify a token against.
    let open = dir.path("open.toml");
    std::fs::write(&open, "").unwrap();
    let out = tokio::task::spawn_blocking(move || catalog_run(&open, &["--token", "t"]))
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs [auth]"));
}
