//! Authorization views: two principals with different scopes see different lists
//! from one gateway, are refused each other's sessions, and what a caller may not
//! use answers exactly like an item that does not exist.

mod auth_support;

use auth_support::{Backend, Host, Issuer, gateway};
use serde_json::{Value, json};

const RESOURCE: &str = "https://gw.example.test/mcp";

async fn setup() -> (Issuer, Backend, mcpgate::Gateway, Host) {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let toml = format!(
        r#"
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        required_scopes = ["mcp"]

        [policy]
        default = "deny"
        [[policy.rules]]
        scopes = ["tools:read"]
        backends = ["rec"]
        tools = ["echo"]
        resources = ["mem://public/*"]
        [[policy.rules]]
        scopes = ["tools:admin"]
        backends = ["rec"]
        [[policy.rules]]
        effect = "deny"
        claims = {{ groups = "contractors" }}
        tools = ["delete_*"]

        [backends.rec]
        type = "http"
        url = "{}"
        "#,
        issuer.url, backend.url
    );
    let gw = gateway(&toml).await;
    let host = Host::new(&gw);
    (issuer, backend, gw, host)
}

fn token(issuer: &Issuer, sub: &str, scope: &str) -> String {
    issuer.mint(&issuer.claims(sub, scope, RESOURCE))
}

fn error(v: &Value) -> (i64, String) {
    (
        v["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {v}")),
        v["error"]["message"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test]
async fn two_principals_see_different_lists_and_not_each_others_sessions() {
    let (issuer, _b, _gw, host) = setup().await;
    let alice = token(&issuer, "alice", "mcp tools:read");
    let bob = token(&issuer, "bob", "mcp tools:admin");
    let sa = host.initialize(Some(&alice)).await;
    let sb = host.initialize(Some(&bob)).await;
    assert_eq!(host.tool_names(Some(&alice), &sa).await, ["rec__echo"]);
    assert_eq!(
        host.tool_names(Some(&bob), &sb).await,
        [
            "rec__add",
            "rec__delete_all",
            "rec__echo",
            "rec__file_ticket"
        ]
    );
    let prompts = host.rpc(Some(&alice), &sa, "prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"], json!([]));
    let prompts = host.rpc(Some(&bob), &sb, "prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"][0]["name"], "rec__greet");
    let res = host
        .rpc(Some(&alice), &sa, "resources/list", json!({}))
        .await;
    let uris: Vec<&str> = res["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["rec+mem://public/readme"]);

    // Each is refused the other's session, as if it did not exist.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(host.post(Some(&alice), Some(&sb), &list).await.status, 404);
    assert_eq!(host.post(Some(&bob), Some(&sa), &list).await.status, 404);
    let del = host
        .send(
            host.http
                .delete(&host.url)
                .header("authorization", format!("Bearer {alice}"))
                .header("mcp-session-id", &sb),
        )
        .await;
    assert_eq!(del.status, 404);
    // Bob's session still works for Bob; a fresh token of Alice's works on hers.
    assert_eq!(host.tool_names(Some(&bob), &sb).await.len(), 4);
    let alice2 = token(&issuer, "alice", "mcp tools:read");
    assert_eq!(host.tool_names(Some(&alice2), &sa).await, ["rec__echo"]);
    // Without a token, nobody's session is reachable.
    assert_eq!(host.post(None, Some(&sa), &list).await.status, 401);
}

#[tokio::test]
async fn hidden_items_answer_like_missing_ones() {
    let (issuer, backend, _gw, host) = setup().await;
    let alice = token(&issuer, "alice", "mcp tools:read");
    let s = host.initialize(Some(&alice)).await;
    let call = |name: &str| json!({"name": name, "arguments": {}});
    let hidden = host
        .rpc(Some(&alice), &s, "tools/call", call("rec__add"))
        .await;
    let missing = host
        .rpc(Some(&alice), &s, "tools/call", call("rec__nope"))
        .await;
    assert_eq!(error(&hidden), (-32602, "Unknown tool: rec__add".into()));
    assert_eq!(error(&missing), (-32602, "Unknown tool: rec__nope".into()));
    let read = |uri: &str| json!({ "uri": uri });
    let hidden = host
        .rpc(
            Some(&alice),
            &s,
            "resources/read",
            read("rec+mem://private/payroll"),
        )
        .await;
    let missing = host
        .rpc(Some(&alice), &s, "resources/read", read("nope+mem://x"))
        .await;
    assert_eq!(error(&hidden).0, -32002);
    assert_eq!(error(&hidden).1, error(&missing).1);
    let ok = host
        .rpc(
            Some(&alice),
            &s,
            "tools/call",
            json!({"name": "rec__echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert!(ok["result"]["content"].is_array(), "{ok}");
    let ok = host
        .rpc(
            Some(&alice),
            &s,
            "resources/read",
            read("rec+mem://public/readme"),
        )
        .await;
    assert!(ok["result"]["contents"].is_array(), "{ok}");
    // The backend never saw the hidden calls.
    let names: Vec<Value> = backend.calls().iter().map(|p| p["name"].clone()).collect();
    assert_eq!(names, [json!("echo")]);
}

#[tokio::test]
async fn claims_deny_and_scopes_are_rechecked_on_every_request() {
    let (issuer, _b, _gw, host) = setup().await;
    let mut c = issuer.claims("erin", "mcp tools:admin", RESOURCE);
    c["groups"] = json!(["dev", "contractors"]);
    let contractor = issuer.mint(&c);
    let s = host.initialize(Some(&contractor)).await;
    assert_eq!(
        host.tool_names(Some(&contractor), &s).await,
        ["rec__add", "rec__echo", "rec__file_ticket"]
    );
    // Same principal, a token with fewer scopes: the session's view follows it.
    let mut c = issuer.claims("erin", "mcp tools:read", RESOURCE);
    c["groups"] = json!(["dev", "contractors"]);
    let reader = issuer.mint(&c);
    assert_eq!(host.tool_names(Some(&reader), &s).await, ["rec__echo"]);
}
