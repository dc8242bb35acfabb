//! Hot reload of `[endpoints]` and `server.path`: a real `mcpgate serve` whose
//! config file is rewritten and sent SIGHUP. An added endpoint serves at once,
//! a removed one answers 404 and its sessions end (their GET streams close), a
//! moved one serves at its new path only, and the sessions of untouched
//! endpoints go on; with a shared store they end for every replica. With
//! `[auth]`, an added endpoint's RFC 9728 document and challenge appear with it.

mod auth_support;
mod common;

use std::time::Duration;

use auth_support::{Backend, Host, Issuer, gateway};
use common::client::SseStream;
use common::served::Served;
use common::{McpClient, names};
use serde_json::{Value, json};

const BACKENDS: &str = r#"
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
"#;

fn endpoint(name: &str, path: &str, backend: &str) -> String {
    format!(
        "[endpoints.{name}]\npath = \"{path}\"\nbackends = [\"{backend}\"]\ntools = [\"echo\"]\n"
    )
}

async fn session_at(gw: &Served, path: &str) -> McpClient {
    let mut c = McpClient::new(&format!("{}{path}", gw.base));
    c.initialize(json!({})).await;
    c
}

async fn status(c: &McpClient, method: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": c.next_id(), "method": method, "params": {}});
    c.post(&[], body.to_string()).await.status.as_u16()
}

/// Whether `stream` ends within `within`, after whatever it carried first
/// (a reload tells every host its lists changed).
async fn closes(stream: &mut SseStream, within: Duration) -> bool {
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end {
        if stream.ends_within(Duration::from_millis(100)).await {
            return true;
        }
        let _ = stream.next(Duration::ZERO).await;
    }
    false
}

async fn tools(c: &McpClient) -> Vec<String> {
    names(
        c.request("tools/list", json!({})).await.result()["tools"]
            .as_array()
            .unwrap(),
    )
}

#[tokio::test]
async fn endpoints_are_added_removed_and_moved_without_touching_the_others() {
    let before = format!(
        "{BACKENDS}{}{}{}",
        endpoint("eng", "/mcp/eng", "alpha"),
        endpoint("ops", "/mcp/ops", "beta"),
        endpoint("docs", "/mcp/docs", "alpha"),
    );
    let gw = Served::start(&before).await;
    let eng = session_at(&gw, "/mcp/eng").await;
    let ops = session_at(&gw, "/mcp/ops").await;
    let docs = session_at(&gw, "/mcp/docs").await;
    let mut streams = (
        eng.get_stream().await,
        ops.get_stream().await,
        docs.get_stream().await,
    );
    assert_eq!(
        McpClient::new(&format!("{}/mcp/sup", gw.base))
            .post(&[], "{}")
            .await
            .status,
        404
    );

    // eng untouched, ops removed, docs moved to /mcp/help, sup added.
    let after = format!(
        "{BACKENDS}{}{}{}",
        endpoint("eng", "/mcp/eng", "alpha"),
        endpoint("docs", "/mcp/help", "alpha"),
        endpoint("sup", "/mcp/sup", "beta"),
    );
    gw.reload(&after).await;

    assert!(
        closes(&mut streams.1, Duration::from_secs(5)).await,
        "ops' stream closed"
    );
    assert!(
        closes(&mut streams.2, Duration::from_secs(5)).await,
        "docs' stream closed"
    );
    assert_eq!(status(&ops, "ping").await, 404, "removed");
    assert_eq!(
        status(&docs, "ping").await,
        404,
        "old path of a moved endpoint"
    );
    let mut stale = docs.clone();
    stale.url = format!("{}/mcp/help", gw.base);
    assert_eq!(status(&stale, "ping").await, 404, "its sessions ended");

    let help = session_at(&gw, "/mcp/help").await;
    assert_eq!(tools(&help).await, ["alpha__echo"]);
    let sup = session_at(&gw, "/mcp/sup").await;
    assert_eq!(tools(&sup).await, ["beta__echo"]);

    // The untouched endpoint's session and stream went on.
    assert_eq!(status(&eng, "ping").await, 200);
    assert_eq!(tools(&eng).await, ["alpha__echo"]);
    assert!(!closes(&mut streams.0, Duration::from_millis(500)).await);
    let applied = gw.log().lines().any(|l| {
        let v: Value = serde_json::from_str(l).unwrap_or_default();
        v["fields"]["message"] == "configuration applied" && v["fields"]["sessions_ended"] == 2
    });
    assert!(applied, "{}", gw.log());
}

#[tokio::test]
async fn server_path_moves_and_gives_way_to_endpoints() {
    let gw = Served::start(BACKENDS).await;
    let old = session_at(&gw, "/mcp").await;
    let mut stream = old.get_stream().await;

    gw.reload(&BACKENDS.replace(
        "metrics_listen = \"off\"",
        "metrics_listen = \"off\"\npath = \"/gw\"",
    ))
    .await;
    assert!(closes(&mut stream, Duration::from_secs(5)).await);
    assert_eq!(status(&old, "ping").await, 404);
    let moved = session_at(&gw, "/gw").await;
    assert_eq!(tools(&moved).await.len(), 28, "both backends");

    // Endpoints replace the single one at server.path.
    gw.reload(&format!(
        "{BACKENDS}{}",
        endpoint("eng", "/mcp/eng", "alpha")
    ))
    .await;
    assert_eq!(status(&moved, "ping").await, 404);
    let at_gw = McpClient::new(&format!("{}/gw", gw.base));
    assert_eq!(
        at_gw.post(&[], "{}").await.status,
        404,
        "server.path is no endpoint now"
    );
    let eng = session_at(&gw, "/mcp/eng").await;
    assert_eq!(tools(&eng).await, ["alpha__echo"]);
}

#[tokio::test]
async fn a_removed_endpoints_sessions_end_on_every_replica() {
    use common::store::{TestRedis, at, replica};
    let redis = TestRedis::start().await;
    let endpoints = format!(
        "{}{}",
        endpoint("eng", "/mcp/eng", "alpha"),
        endpoint("ops", "/mcp/ops", "alpha")
    );
    let alpha = "[backends.alpha]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n";
    let (a, b) = (
        replica(Some(&redis), &format!("{alpha}{endpoints}")).await,
        replica(Some(&redis), &format!("{alpha}{endpoints}")).await,
    );
    let ops = session_at(&a, "/mcp/ops").await;
    let eng = session_at(&a, "/mcp/eng").await;
    let mut ops_at_b = at(&ops, &b);
    ops_at_b.url = format!("{}/mcp/ops", b.base);
    assert_eq!(
        status(&ops_at_b, "ping").await,
        200,
        "served on B from its record"
    );

    // A reloads without `ops` (B has not yet): the session is gone on B too.
    let config = std::fs::read_to_string(a.dir.path("gw.toml")).unwrap();
    let without = config.replace(&endpoint("ops", "/mcp/ops", "alpha"), "");
    assert_ne!(config, without);
    a.reload(&without).await;
    assert_eq!(status(&ops, "ping").await, 404, "the path is gone on A");
    let ended = common::wait_for(Duration::from_secs(5), || {
        redis.keys("mcpg:*:rec").len() == 1
    })
    .await;
    assert!(ended, "{:?}", redis.keys("mcpg:*"));
    let mut fresh = McpClient::new(&format!("{}/mcp/ops", b.base));
    fresh.session = ops.session.clone();
    fresh.version = ops.version.clone();
    assert_eq!(status(&fresh, "ping").await, 404, "ended for B as well");
    assert_eq!(status(&eng, "ping").await, 200);
}

const RESOURCE: &str = "https://gw.example.test/mcp";

fn auth_config(issuer: &Issuer, backend: &Backend, endpoints: &str) -> String {
    format!(
        r#"
        [server]
        metrics_listen = "off"
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        [backends.rec]
        type = "http"
        url = "{}"
        [endpoints.eng]
        path = "/mcp/eng"
        {endpoints}
        "#,
        issuer.url, backend.url
    )
}

fn parse(text: &str) -> mcpgate::config::Config {
    mcpgate::config::Config::parse(text, std::path::Path::new("t.toml"), &|_| None).unwrap()
}

#[tokio::test]
async fn an_added_endpoint_brings_its_metadata_and_scopes() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&auth_config(&issuer, &backend, "")).await;
    let mut eng = Host::new(&gw);
    eng.url = format!("{}/mcp/eng", eng.base);
    let token = issuer.mint(&issuer.claims("alice", "mcp", RESOURCE));
    let session = eng.initialize(Some(&token)).await;
    let document = |path: &str| {
        reqwest::get(format!(
            "{}/.well-known/oauth-protected-resource{path}",
            eng.base
        ))
    };
    assert_eq!(document("/mcp/sup").await.unwrap().status(), 404);

    let sup = "[endpoints.sup]\npath = \"/mcp/sup\"\nscopes = [\"support\"]";
    let report = gw
        .reload(&parse(&auth_config(&issuer, &backend, sup)))
        .await;
    assert_eq!(report.endpoints_added, ["sup"], "{report:?}");
    assert!(report.refused.is_none() && report.sessions_ended == 0);
    let doc: Value =
        serde_json::from_str(&document("/mcp/sup").await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(doc["resource"], format!("{RESOURCE}/sup"), "{doc}");

    let mut at_sup = Host::new(&gw);
    at_sup.url = format!("{}/mcp/sup", at_sup.base);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let refused = at_sup.post(Some(&token), None, &init).await;
    assert_eq!(
        refused.status, 403,
        "the endpoint's own scope: {}",
        refused.text
    );
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("oauth-protected-resource/mcp/sup"),
        "{challenge}"
    );
    let scoped = issuer.mint(&issuer.claims("alice", "mcp support", RESOURCE));
    assert_eq!(at_sup.post(Some(&scoped), None, &init).await.status, 200);

    // The untouched endpoint's session goes on.
    let r = eng
        .rpc(Some(&token), &session, "tools/list", json!({}))
        .await;
    assert!(r["result"]["tools"].is_array(), "{r}");
}
