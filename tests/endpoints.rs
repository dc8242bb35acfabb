//! Virtual endpoints (`[endpoints.NAME]`): several MCP servers on one listener. A
//! real `mcpgate serve` with two fake stdio backends serves each endpoint its own
//! catalogue to the same host, keeps their sessions apart and no longer serves
//! `server.path`; with `[auth]` (a real issuer) each endpoint has its own scopes,
//! audience and RFC 9728 document, and `mcpgate catalog --endpoint` shows what
//! `tools/list` returns there.

mod auth_support;
mod common;

use std::process::Command;

use auth_support::{Backend, Host, Issuer, gateway};
use common::served::Served;
use common::{McpClient, TestDir, names};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
metrics_listen = "off"
[backends.alpha]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--label", "alpha"]
[backends.beta]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--label", "beta"]
[endpoints.eng]
path = "/mcp/eng"
backends = ["alpha"]
exclude_tools = ["s*", "big", "ask_*", "add_tool"]
[endpoints.ops]
path = "/mcp/ops/"
tools = ["echo", "whoami"]
"#;

async fn tools_at(url: &str) -> (McpClient, Vec<String>) {
    let mut c = McpClient::new(url);
    c.initialize(json!({})).await;
    let mut listed = names(&c.list_all("tools/list", "tools").await);
    listed.sort();
    (c, listed)
}

#[tokio::test]
async fn each_endpoint_serves_its_own_catalogue_and_sessions() {
    let gw = Served::start(CONFIG).await;
    let (eng_url, ops_url) = (
        format!("{}/mcp/eng", gw.base),
        format!("{}/mcp/ops", gw.base),
    );
    let (eng, eng_tools) = tools_at(&eng_url).await;
    assert_eq!(
        eng_tools,
        [
            "alpha__delay_echo",
            "alpha__echo",
            "alpha__links",
            "alpha__log",
            "alpha__whoami"
        ],
        "eng: alpha only, without the excluded tools"
    );
    let (ops, ops_tools) = tools_at(&ops_url).await;
    assert_eq!(
        ops_tools,
        ["alpha__echo", "alpha__whoami", "beta__echo", "beta__whoami"]
    );

    // What an endpoint does not serve answers as a tool that does not exist.
    let r = eng.call_tool("beta__echo", json!({"text": "x"})).await;
    assert!(
        r.response["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Unknown tool")),
        "{}",
        r.response
    );
    let r = ops.call_tool("beta__echo", json!({"text": "hi"})).await;
    assert_eq!(r.result()["content"][0]["text"], "hi", "{}", r.response);

    // A session of one endpoint is unknown at the other (404), and stays usable.
    let mut stolen = ops.clone();
    stolen.url = eng_url.clone();
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}).to_string();
    assert_eq!(stolen.post(&[], ping.clone()).await.status.as_u16(), 404);
    assert_eq!(ops.post(&[], ping).await.status.as_u16(), 200);

    // With endpoints configured, `server.path` is not an endpoint.
    let r = McpClient::new(&gw.url).post(&[], "{}").await;
    assert_eq!(r.status.as_u16(), 404);

    // A stateless (2026-07-28) request at an endpoint sees that endpoint's catalogue.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
    let r = McpClient::new(&ops_url)
        .post(
            &[
                ("mcp-method", "tools/list"),
                ("mcp-protocol-version", "2026-07-28"),
            ],
            body.to_string(),
        )
        .await;
    let listed = r.json();
    assert_eq!(r.status.as_u16(), 200, "{listed}");
    let mut modern = names(listed["result"]["tools"].as_array().unwrap());
    modern.sort();
    assert_eq!(modern, ops_tools, "{listed}");
}

const RESOURCE: &str = "https://gw.example.test/mcp";

fn auth_config(issuer: &Issuer, backend: &Backend) -> String {
    format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        admin_endpoints = true
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        required_scopes = ["mcp"]
        [backends.rec]
        type = "http"
        url = "{}"
        [endpoints.eng]
        path = "/mcp/eng"
        scopes = ["eng"]
        exclude_tools = ["delete_*"]
        [endpoints.support]
        path = "/mcp/support"
        tools = ["file_ticket"]
        "#,
        issuer.url, backend.url
    )
}

fn host_at(gw: &mcpgate::Gateway, path: &str) -> Host {
    let mut h = Host::new(gw);
    h.url = format!("{}{path}", h.base);
    h
}

async fn listed(host: &Host, token: &str) -> Vec<Value> {
    let session = host.initialize(Some(token)).await;
    let r = host
        .rpc(Some(token), &session, "tools/list", json!({}))
        .await;
    r["result"]["tools"].as_array().unwrap().clone()
}

#[tokio::test]
async fn endpoints_have_their_own_scopes_audience_and_metadata() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&auth_config(&issuer, &backend)).await;
    let (eng, support) = (host_at(&gw, "/mcp/eng"), host_at(&gw, "/mcp/support"));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});

    // Without the endpoint's scope: 403 insufficient_scope, naming all it needs.
    let plain = issuer.mint(&issuer.claims("alice", "mcp", RESOURCE));
    let a = eng.post(Some(&plain), None, &init).await;
    assert_eq!(a.status, 403, "{}", a.text);
    let challenge = a.header("www-authenticate").unwrap_or_default().to_owned();
    assert!(
        challenge.contains("oauth-protected-resource/mcp/eng\"")
            && challenge.contains("scope=\"mcp eng\"")
            && challenge.contains("insufficient_scope"),
        "{challenge}"
    );
    // The same token is enough where no extra scope is asked.
    let tools = listed(&support, &plain).await;
    assert_eq!(names(&tools), ["rec__file_ticket"]);

    // A token issued for another endpoint's resource is refused here.
    let for_support =
        issuer.mint(&issuer.claims("alice", "mcp eng", &format!("{RESOURCE}/support")));
    assert_eq!(eng.post(Some(&for_support), None, &init).await.status, 401);
    assert_eq!(
        support.post(Some(&for_support), None, &init).await.status,
        200
    );
    // One for this endpoint, or for the gateway as a whole, is accepted.
    let for_eng = issuer.mint(&issuer.claims("alice", "mcp eng", &format!("{RESOURCE}/eng")));
    let mut eng_tools = names(&listed(&eng, &for_eng).await);
    eng_tools.sort();
    assert_eq!(eng_tools, ["rec__add", "rec__echo", "rec__file_ticket"]);
    let whole = issuer.mint(&issuer.claims("bob", "mcp eng", RESOURCE));
    assert_eq!(listed(&eng, &whole).await.len(), 3);

    // Each endpoint's RFC 9728 document names its own resource and scopes.
    let doc: Value = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource/mcp/eng",
        eng.base
    ))
    .await
    .unwrap()
    .text()
    .await
    .map(|t| serde_json::from_str(&t).unwrap())
    .unwrap();
    assert_eq!(doc["resource"], format!("{RESOURCE}/eng"), "{doc}");
    assert_eq!(doc["scopes_supported"], json!(["eng", "mcp"]), "{doc}");

    // `mcpgate catalog --endpoint` and `/admin/catalog?endpoint=` show what
    // tools/list returns at that endpoint.
    let dir = TestDir::new();
    let file = dir.path("gw.toml");
    std::fs::write(&file, auth_config(&issuer, &backend)).unwrap();
    let claims = issuer.claims("bob", "mcp eng", RESOURCE);
    let cli = tokio::task::spawn_blocking({
        let (file, claims) = (file.clone(), claims.to_string());
        move || {
            let run = |extra: &[&str]| {
                Command::new(env!("CARGO_BIN_EXE_mcpgate"))
                    .args([
                        "catalog", "--json", "--wait", "10", "--claims", &claims, "--config",
                    ])
                    .arg(&file)
                    .args(extra)
                    .output()
                    .unwrap()
            };
            (
                run(&["--endpoint", "eng"]),
                run(&[]),
                run(&["--endpoint", "nope"]),
            )
        }
    })
    .await
    .unwrap();
    assert!(
        cli.0.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.0.stderr)
    );
    let seen: Value = serde_json::from_slice(&cli.0.stdout).unwrap();
    let mut shown = names(seen["tools"].as_array().unwrap());
    shown.sort();
    assert_eq!(
        shown, eng_tools,
        "the CLI shows what tools/list returns at eng"
    );
    for (out, needle) in [(&cli.1, "several are configured"), (&cli.2, "unknown")] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.contains("eng, support"),
            "{err}"
        );
    }
    let addr = gw.metrics_addr.expect("metrics listener");
    let mut url = url::Url::parse(&format!("http://{addr}/admin/catalog")).unwrap();
    url.query_pairs_mut()
        .append_pair("claims", &claims.to_string())
        .append_pair("endpoint", "eng");
    let admin = reqwest::get(url).await.unwrap().text().await.unwrap();
    let admin: Value = serde_json::from_str(&admin).unwrap();
    assert_eq!(admin, seen, "/admin/catalog shows what the CLI prints");
}

/// What an endpoint serves reloads with `[policy]` (same sessions, new lists);
/// a reload that moves it serves it at the new path only and ends its
/// sessions (their URL is gone).
#[tokio::test]
async fn a_reload_changes_what_an_endpoint_serves_and_where() {
    let backend = Backend::start().await;
    let config = |tools: &str, path: &str| {
        format!(
            r#"
            [server]
            metrics_listen = "off"
            [backends.rec]
            type = "http"
            url = "{}"
            [endpoints.eng]
            path = "{path}"
            tools = {tools}
            "#,
            backend.url
        )
    };
    let parse = |text: &str| {
        mcpgate::config::Config::parse(text, std::path::Path::new("t.toml"), &|_| None).unwrap()
    };
    let gw = gateway(&config(r#"["echo"]"#, "/mcp/eng")).await;
    let eng = host_at(&gw, "/mcp/eng");
    let session = eng.initialize(None).await;
    let tools = |r: Value| {
        let mut n = names(r["result"]["tools"].as_array().unwrap());
        n.sort();
        n
    };
    let list = || eng.rpc(None, &session, "tools/list", json!({}));
    assert_eq!(tools(list().await), ["rec__echo"]);

    let report = gw
        .reload(&parse(&config(r#"["echo", "add"]"#, "/mcp/eng")))
        .await;
    assert!(report.policy && report.refused.is_none(), "{report:?}");
    assert!(report.endpoints_moved.is_empty() && report.sessions_ended == 0);
    assert_eq!(
        tools(list().await),
        ["rec__add", "rec__echo"],
        "same session"
    );

    let report = gw.reload(&parse(&config(r#"["add"]"#, "/mcp/moved"))).await;
    assert!(report.refused.is_none(), "{report:?}");
    assert_eq!(report.endpoints_moved, ["eng"]);
    assert_eq!(report.sessions_ended, 1);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let old = eng.post(None, Some(&session), &ping).await;
    assert_eq!(old.status, 404, "the old path is gone: {}", old.text);
    let moved = host_at(&gw, "/mcp/moved");
    let at_new = moved.post(None, Some(&session), &ping).await;
    assert_eq!(at_new.status, 404, "the session ended: {}", at_new.text);
    let fresh = moved.initialize(None).await;
    let r = moved.rpc(None, &fresh, "tools/list", json!({})).await;
    assert_eq!(tools(r), ["rec__add"]);
}
