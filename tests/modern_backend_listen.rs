//! What a 2026-07-28 backend sends on its own reaches hosts through the one
//! `subscriptions/listen` the gateway keeps open on each modern connection
//! (dual-era R29): its list changes re-list the catalogue and are announced (to a
//! legacy session's GET stream, to a modern host's listen), and a legacy host's
//! `resources/subscribe` on such a backend is fed from the listen's
//! `resourceSubscriptions` (`notifications/resources/updated` with the gateway's
//! URI), until it unsubscribes. The backend is the built-in demo server, spoken
//! to as a modern backend (`toggle_bonus` changes its lists, `bump_counter`
//! updates `demo://counter`), shared and per session.

mod common;

use std::time::Duration;

use common::{McpClient, SseStream, TestGateway};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

fn config(mode: &str) -> String {
    format!(
        "[backends.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-server\"]\nera = \"modern\"\nmode = \"{mode}\"\n",
        env!("CARGO_BIN_EXE_mcpgate")
    )
}

/// The methods of the notifications arriving on `stream` within `within`.
async fn methods(stream: &mut SseStream, within: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(m) = stream.next(within).await {
        out.push(m);
    }
    out
}

async fn call(s: &McpClient, tool: &str) {
    let r = s.call_tool(tool, json!({})).await;
    assert!(r.response.get("result").is_some(), "{tool}: {}", r.response);
}

#[tokio::test]
async fn list_changes_of_a_modern_backend_reach_both_eras() {
    let gw = TestGateway::start(&config("shared")).await;
    let legacy = gw.session().await;
    let mut get = legacy.get_stream().await;
    // A modern host's listen on the gateway, for tools only.
    let c = gw.client();
    let listen = json!({"jsonrpc": "2.0", "id": "watch", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "subscriptions/listen"),
    ];
    let mut watch = c.open_with(&h, &listen).await;
    let ack = watch.next(Duration::from_secs(5)).await.unwrap_or_default();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );

    call(&legacy, "demo__toggle_bonus").await;
    let seen = methods(&mut get, Duration::from_secs(3)).await;
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "the legacy session is told: {seen:?}"
    );
    let tools = legacy.list_all("tools/list", "tools").await;
    assert!(
        tools.iter().any(|t| t["name"] == "demo__bonus_echo"),
        "and the catalogue was re-listed"
    );
    let m = watch.next(Duration::from_secs(3)).await.unwrap_or_default();
    assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
    assert_eq!(
        m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "watch",
        "tagged with the host's listen id, not the backend's: {m}"
    );
}

async fn subscribed_updates_follow_the_subscription(mode: &str) {
    let gw = TestGateway::start(&config(mode)).await;
    let s = gw.session().await;
    let mut get = s.get_stream().await;
    let uri = "demo+demo://counter";
    let r = s.request("resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(r.response["result"], json!({}), "{mode}: {}", r.response);
    call(&s, "demo__bump_counter").await;
    let seen = methods(&mut get, Duration::from_secs(3)).await;
    let updated: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .collect();
    assert_eq!(updated.len(), 1, "{mode}: {seen:?}");
    assert_eq!(updated[0]["params"]["uri"], uri, "{mode}: {seen:?}");
    assert!(
        updated[0]["params"]
            .get("_meta")
            .is_none_or(|m| m.get("io.modelcontextprotocol/subscriptionId").is_none()),
        "{mode}: the backend's listen id stays inside: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|m| m["method"] != "notifications/subscriptions/acknowledged"),
        "{mode}: a legacy host never sees a listen acknowledgement: {seen:?}"
    );

    let r = s
        .request("resources/unsubscribe", json!({"uri": uri}))
        .await;
    assert_eq!(r.response["result"], json!({}), "{mode}: {}", r.response);
    call(&s, "demo__bump_counter").await;
    let seen = methods(&mut get, Duration::from_secs(2)).await;
    assert!(
        seen.iter()
            .all(|m| m["method"] != "notifications/resources/updated"),
        "{mode}: nothing after unsubscribing: {seen:?}"
    );
}

#[tokio::test]
async fn a_legacy_subscription_on_a_shared_modern_backend_is_fed_by_its_listen() {
    subscribed_updates_follow_the_subscription("shared").await;
}

#[tokio::test]
async fn a_legacy_subscription_on_a_per_session_modern_backend_is_fed_by_its_listen() {
    subscribed_updates_follow_the_subscription("per_session").await;
}
