//! The read-only admin endpoints on the metrics listener (`[server]
//! admin_endpoints`): backend state with restarts and the last error, the
//! catalogue a principal is shown (tests/catalog_cli.rs compares it with the CLI
//! and with `tools/list`), off by default, never on the MCP listener.

mod common;

use std::time::Duration;

use common::{TestGateway, fake_stdio};
use serde_json::{Value, json};

fn config(admin: bool, backend_args: &str) -> String {
    format!(
        r#"
        [server]
        listen = "127.0.0.1:0"
        metrics_listen = "127.0.0.1:0"
        admin_endpoints = {admin}
        [backends.fake]
        type = "stdio"
        mode = "shared"
        command = "{}"
        args = [{backend_args}]
        [backends.remote]
        type = "http"
        url = "http://user:secret@127.0.0.1:9/mcp?token=abc#frag"
        required = false
        "#,
        fake_stdio()
    )
}

async fn get(gw: &TestGateway, path: &str) -> (u16, Option<Value>) {
    let addr = gw.gateway().metrics_addr.expect("metrics listener");
    let resp = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_slice(&resp.bytes().await.unwrap()).ok(),
    )
}

/// `/admin/backends` once backend `fake` is up (at most 10 s).
async fn when_up(gw: &TestGateway) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get(gw, "/admin/backends").await;
        assert_eq!(status, 200);
        let body = body.unwrap();
        if body["backends"]["fake"]["state"] == "up" && body["backends"]["fake"]["tools"] != 0 {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fake never up: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn backends_report_state_restarts_and_the_last_error() {
    let gw = TestGateway::start(&config(true, r#""--exit-after-calls", "1""#)).await;
    let body = when_up(&gw).await;
    let fake = &body["backends"]["fake"];
    assert_eq!(fake["state"], "up", "{body}");
    assert_eq!(fake["transport"], "stdio");
    assert_eq!(fake["restarts"], 0, "{body}");
    assert!(
        fake["up_since"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );
    // Nothing listens on port 9: down, with the cause, and the URL without its
    // user info, query or fragment (they may carry credentials).
    let remote = &body["backends"]["remote"];
    assert_eq!(remote["state"], "down", "{body}");
    assert_eq!(remote["target"], "http://127.0.0.1:9/mcp", "{body}");
    assert!(remote["last_error"]["cause"].is_string(), "{body}");
    assert!(!body.to_string().contains("secret") && !body.to_string().contains("abc"));

    // The fake exits at its second call: the supervisor restarts it.
    let host = gw.session().await;
    for _ in 0..2 {
        let _ = host.call_tool("fake__echo", json!({"text": "x"})).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let body = get(&gw, "/admin/backends").await.1.unwrap();
        let fake = &body["backends"]["fake"];
        if fake["restarts"].as_u64() >= Some(1) && fake["state"] == "up" {
            assert!(fake["last_error"]["cause"].is_string(), "{body}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no restart reported: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn catalog_without_claims_and_bad_claims() {
    let gw = TestGateway::start(&config(true, "")).await;
    when_up(&gw).await;
    let (status, body) = get(&gw, "/admin/catalog").await;
    assert_eq!(status, 200);
    let body = body.unwrap();
    let host = gw.session().await;
    let listed = host.list_all("tools/list", "tools").await;
    let shown: Vec<&Value> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    let names: Vec<&Value> = listed.iter().map(|t| &t["name"]).collect();
    assert_eq!(shown, names, "{body}");
    assert!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["backend"] == "fake")
    );

    for claims in ["%5B1%5D", "%7Bnot", "%7B%22sub%22%3A%22alice%22%7D"] {
        let (status, body) = get(&gw, &format!("/admin/catalog?claims={claims}")).await;
        assert_eq!(status, 400, "{claims}");
        assert!(
            body.unwrap()["error"]
                .as_str()
                .unwrap()
                .starts_with("claims")
        );
    }
}

#[tokio::test]
async fn off_by_default_and_never_on_the_mcp_listener() {
    let gw = TestGateway::start(&config(false, "")).await;
    for path in ["/admin/backends", "/admin/catalog"] {
        assert_eq!(
            get(&gw, path).await.0,
            404,
            "{path} on the metrics listener"
        );
    }
    let gw = TestGateway::start(&config(true, "")).await;
    let base = gw.client().url.trim_end_matches("/mcp").to_owned();
    for path in ["/admin/backends", "/admin/catalog"] {
        let status = reqwest::get(format!("{base}{path}"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{path} on the MCP listener");
    }
}
