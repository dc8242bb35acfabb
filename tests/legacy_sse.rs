//! Legacy HTTP+SSE backends: the `endpoint` event is resolved against the stream
//! URL without losing its path prefix; a prefix-unaware absolute path is used as
//! given, and the 404 it earns is a clear backend error, not a hang; an endpoint on
//! another origin is refused and nothing is sent there. A `type = "http"` backend
//! whose `initialize` POST gets 405 falls back to the legacy transport.

mod common;

use std::time::Duration;

use common::{FakeSse, McpClient, TestGateway, names, text_of};
use serde_json::json;
use tokio::time::Instant;

fn config(kind: &str, url: &str) -> String {
    format!(
        "[server]\nmetrics_listen = \"off\"\n[backends.old]\ntype = \"{kind}\"\nurl = \"{url}\"\nmode = \"shared\"\ntimeout = \"3s\"\n"
    )
}

async fn works(s: &McpClient) {
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"old__echo".to_owned()), "{tools:?}");
    let r = s.call_tool("old__echo", json!({"text": "legacy"})).await;
    assert_eq!(text_of(&r.response), "legacy");
    let r = s
        .request("resources/read", json!({"uri": "old+fx://item/3"}))
        .await;
    assert_eq!(r.result()["contents"][0]["text"], "item 3");
}

/// POST targets the fake received.
fn posts(fx: &FakeSse) -> Vec<(String, u16)> {
    fx.log()
        .into_iter()
        .filter(|r| r.http_method == "POST")
        .map(|r| (r.target, r.status))
        .collect()
}

#[tokio::test]
async fn a_relative_endpoint_keeps_the_path_prefix() {
    let fx = FakeSse::start("/tenant1", "messages?sessionId={sid}").await;
    let gw = TestGateway::start(&config("sse", &fx.url)).await;
    works(&gw.session().await).await;
    let p = posts(&fx);
    assert!(!p.is_empty());
    assert!(
        p.iter()
            .all(|(t, s)| t.starts_with("/tenant1/messages?sessionId=abc") && *s == 202),
        "{p:?}"
    );
}

#[tokio::test]
async fn an_absolute_path_with_the_prefix_is_used_as_given() {
    let fx = FakeSse::start("/tenant1", "/tenant1/messages?sessionId={sid}").await;
    let gw = TestGateway::start(&config("sse", &fx.url)).await;
    works(&gw.session().await).await;
    assert!(
        posts(&fx)
            .iter()
            .all(|(t, s)| t.starts_with("/tenant1/messages?") && *s == 202)
    );
}

#[tokio::test]
async fn a_prefix_unaware_endpoint_fails_clearly_and_fast() {
    let fx = FakeSse::start("/tenant1", "/messages?sessionId={sid}").await;
    let gw = TestGateway::start(&config("sse", &fx.url)).await;
    let s = gw.session().await;
    let t = Instant::now();
    let r = s
        .request("resources/read", json!({"uri": "old+fx://static"}))
        .await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "no hang: {:?}",
        t.elapsed()
    );
    let e = &r.response["error"];
    assert_eq!(e["data"]["backend"], "old", "{e}");
    assert!(e["message"].as_str().unwrap().contains("404"), "{e}");
    let p = posts(&fx);
    assert!(!p.is_empty(), "the gateway POSTed where it was told");
    assert!(
        p.iter()
            .all(|(t, s)| t.starts_with("/messages?sessionId=") && *s == 404),
        "the root path, as given: {p:?}"
    );
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_never_contacted() {
    let elsewhere = FakeSse::start("", "messages?sessionId={sid}").await;
    let fx = FakeSse::start(
        "/tenant1",
        &format!("{}/messages?sessionId={{sid}}", elsewhere.base),
    )
    .await;
    let gw = TestGateway::start(&config("sse", &fx.url)).await;
    let s = gw.session().await;
    let t = Instant::now();
    let r = s
        .request("resources/read", json!({"uri": "old+fx://static"}))
        .await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let e = &r.response["error"];
    assert_eq!(e["data"]["backend"], "old", "{e}");
    assert!(e["message"].as_str().unwrap().contains("origin"), "{e}");
    assert!(elsewhere.log().is_empty(), "{:?}", elsewhere.log());
    assert!(posts(&fx).is_empty(), "{:?}", fx.log());
}

#[tokio::test]
async fn an_http_backend_answering_405_falls_back_to_the_legacy_transport() {
    let fx = FakeSse::start("/tenant1", "messages?sessionId={sid}").await;
    let gw = TestGateway::start(&config("http", &fx.url)).await;
    works(&gw.session().await).await;
    let log = fx.log();
    let first = |i: usize| {
        (
            log[i].http_method.clone(),
            log[i].status,
            log[i].rpc_method.clone(),
        )
    };
    // The era probe (`era = "auto"`), refused: legacy; then Streamable HTTP.
    assert_eq!(
        first(0),
        ("POST".into(), 405, Some("server/discover".into())),
        "{log:?}"
    );
    assert_eq!(
        first(1),
        ("POST".into(), 405, Some("initialize".into())),
        "Streamable HTTP first: {log:?}"
    );
    assert_eq!(
        (log[2].http_method.as_str(), log[2].status),
        ("GET", 200),
        "{log:?}"
    );
    let refused = log.iter().filter(|r| r.status == 405).count();
    assert_eq!(
        refused, 2,
        "probed and detected once, then legacy only: {log:?}"
    );
}
