//! Hot reload of `[auth]` and `[policy]`: a valid change applies to the sessions
//! already open (no re-initialize, a `list_changed` to each host), including a
//! moved resource (its metadata document moves too); turning `[auth]` on or off
//! is refused whole and changes nothing.

mod auth_support;
mod common;

use std::path::Path;

use auth_support::{Backend, Host, Issuer, gateway};
use mcpgate::config::Config;
use serde_json::json;

const RESOURCE: &str = "https://gw.example.test/mcp";

/// `[auth]` for `issuer` with `required` scopes, a deny-by-default policy whose
/// `tools:read` rule shows `visible` tools of backend `rec`.
fn config(issuer: &Issuer, backend: &Backend, required: &str, visible: &str) -> String {
    format!(
        r#"
        [server]
        metrics_listen = "off"
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        required_scopes = [{required}]
        [policy]
        default = "deny"
        [[policy.rules]]
        scopes = ["tools:read"]
        backends = ["rec"]
        tools = [{visible}]
        [backends.rec]
        type = "http"
        url = "{}"
        "#,
        issuer.url, backend.url
    )
}

fn parse(toml: &str) -> Config {
    Config::parse(toml, Path::new("reload.toml"), &|_| None).unwrap_or_else(|p| panic!("{p:?}"))
}

#[tokio::test]
async fn a_new_policy_applies_to_open_sessions_without_dropping_them() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&config(&issuer, &backend, "", r#""echo""#)).await;
    let host = Host::new(&gw);
    let token = issuer.mint(&issuer.claims("alice", "tools:read", RESOURCE));
    let session = host.initialize(Some(&token)).await;
    assert_eq!(host.tool_names(Some(&token), &session).await, ["rec__echo"]);

    let report = gw
        .reload(&parse(&config(&issuer, &backend, "", r#""echo", "add""#)))
        .await;
    assert!(report.policy && report.refused.is_none(), "{report:?}");
    assert!(report.is_empty(), "backends untouched: {report:?}");
    let mut names = host.tool_names(Some(&token), &session).await;
    names.sort();
    assert_eq!(names, ["rec__add", "rec__echo"], "same session, new view");
    let r = host
        .rpc(
            Some(&token),
            &session,
            "tools/call",
            json!({"name": "rec__add", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");

    // A broken [policy] never reaches the gateway: the file is refused whole
    // (the process then counts a failed reload, tests/reload.rs).
    let broken = config(&issuer, &backend, "", r#""echo""#)
        .replace(r#"default = "deny""#, r#"default = "maybe""#);
    assert!(Config::parse(&broken, Path::new("reload.toml"), &|_| None).is_err());
    let glob = config(&issuer, &backend, "", r#""[echo""#);
    assert!(
        Config::parse(&glob, Path::new("reload.toml"), &|_| None).is_err(),
        "an invalid glob is refused"
    );

    // Back to the narrow policy: the tool is gone from the list and from calls.
    gw.reload(&parse(&config(&issuer, &backend, "", r#""echo""#)))
        .await;
    assert_eq!(host.tool_names(Some(&token), &session).await, ["rec__echo"]);
    let r = host
        .rpc(
            Some(&token),
            &session,
            "tools/call",
            json!({"name": "rec__add", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    assert!(
        r.get("error").is_some() || r["result"]["isError"] == true,
        "{r}"
    );
}

#[tokio::test]
async fn a_new_required_scope_refuses_tokens_without_it() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&config(&issuer, &backend, "", r#""echo""#)).await;
    let host = Host::new(&gw);
    let token = issuer.mint(&issuer.claims("alice", "tools:read", RESOURCE));
    let session = host.initialize(Some(&token)).await;

    let report = gw
        .reload(&parse(&config(
            &issuer,
            &backend,
            r#""mcp:extra""#,
            r#""echo""#,
        )))
        .await;
    assert!(report.auth, "{report:?}");
    let refused = host
        .post(
            Some(&token),
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let both = issuer.mint(&issuer.claims("alice", "tools:read mcp:extra", RESOURCE));
    assert_eq!(host.tool_names(Some(&both), &session).await, ["rec__echo"]);
}

#[tokio::test]
async fn turning_auth_off_is_refused_whole_and_moving_the_resource_applies() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&config(&issuer, &backend, "", r#""echo""#)).await;
    let host = Host::new(&gw);
    let token = issuer.mint(&issuer.claims("alice", "tools:read", RESOURCE));
    let session = host.initialize(Some(&token)).await;

    // No [auth] and a wide-open policy: neither may apply.
    let open = format!(
        "[backends.rec]\ntype = \"http\"\nurl = \"{}\"\n",
        backend.url
    );
    let report = gw.reload(&parse(&open)).await;
    assert!(
        report
            .refused
            .as_deref()
            .is_some_and(|r| r.contains("[auth]")),
        "{report:?}"
    );
    assert!(!report.policy && !report.auth);
    let anonymous = host
        .post(
            None,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(anonymous.status, 401, "auth still in force");
    assert_eq!(host.tool_names(Some(&token), &session).await, ["rec__echo"]);

    // Moving the resource applies: its metadata document moves with it and
    // tokens must name the new resource.
    let well_known =
        |path: &str| format!("{}/.well-known/oauth-protected-resource{path}", host.base);
    let before = reqwest::get(well_known("/mcp")).await.unwrap();
    assert_eq!(before.status(), 200);
    let moved = config(&issuer, &backend, "", r#""echo", "add""#)
        .replace(RESOURCE, "https://gw.example.test/other");
    let report = gw.reload(&parse(&moved)).await;
    assert!(report.refused.is_none() && report.auth, "{report:?}");
    let doc = reqwest::get(well_known("/other")).await.unwrap();
    let doc: serde_json::Value = serde_json::from_str(&doc.text().await.unwrap()).unwrap();
    assert_eq!(doc["resource"], "https://gw.example.test/other", "{doc}");
    // The endpoint's own path-inserted URL (server.path) serves the same document.
    let at_path = reqwest::get(well_known("/mcp")).await.unwrap();
    assert!(
        at_path
            .text()
            .await
            .unwrap()
            .contains("gw.example.test/other")
    );
    let stale = host
        .post(
            Some(&token),
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
    assert_eq!(
        stale.status, 401,
        "a token for the old resource: {}",
        stale.text
    );
    let fresh = issuer.mint(&issuer.claims("alice", "tools:read", "https://gw.example.test/other"));
    let mut names = host.tool_names(Some(&fresh), &session).await;
    names.sort();
    assert_eq!(names, ["rec__add", "rec__echo"], "same session, new policy");
}
