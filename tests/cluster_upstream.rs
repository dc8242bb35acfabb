//! A per-session Streamable HTTP backend's own session shared by the replicas
//! (`[cluster] redis`, issue 11 item 4): a real `redis-server`, two `mcpgate
//! serve` replicas with the same keys, the fake HTTP backend in per-session
//! mode logging every request. The replica that opens the backend session
//! records its `Mcp-Session-Id` (sealed) in the session's record; another
//! replica calls the backend on that id without an `initialize`; a backend
//! that forgot the id is initialized again once and the new id reaches every
//! replica; a `DELETE` anywhere ends the backend session exactly once.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{TestRedis, at, replica};
use common::{FakeHttp, McpClient, text_of};
use serde_json::json;

async fn session(gw: &Served) -> McpClient {
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    s
}

async fn echo(c: &McpClient, text: &str) -> String {
    let r = c.call_tool("web__echo", json!({ "text": text })).await;
    text_of(&r.response).to_owned()
}

/// `initialize`s the fake received for host sessions: the gateway's own
/// catalogue connections declare sampling, a host session's (this test's
/// hosts declare nothing) does not.
fn host_initializes(fx: &FakeHttp) -> usize {
    fx.calls("initialize")
        .iter()
        .filter(|r| {
            let caps = r
                .body
                .as_ref()
                .and_then(|b| b.pointer("/params/capabilities"));
            caps.is_some_and(|c| c.get("sampling").is_none())
        })
        .count()
}

/// The backend session id each `tools/call` carried, in order.
fn call_sessions(fx: &FakeHttp) -> Vec<String> {
    fx.calls("tools/call")
        .iter()
        .map(|r| r.header("mcp-session-id").unwrap_or("none").to_owned())
        .collect()
}

/// Redis, the fake backend and two replicas A and B that reach it as `web`.
async fn setup() -> (TestRedis, FakeHttp, Served, Served) {
    let redis = TestRedis::start().await;
    let fx = FakeHttp::default_started().await;
    let web = format!("[backends.web]\ntype = \"http\"\nurl = \"{}\"\n", fx.url);
    let a = replica(Some(&redis), &web).await;
    let b = replica(Some(&redis), &web).await;
    (redis, fx, a, b)
}

#[tokio::test]
async fn a_backend_session_opened_on_a_is_called_from_b_without_initialize() {
    let (redis, fx, a, b) = setup().await;
    let s = session(&a).await;
    assert_eq!(echo(&s, "on a").await, "on a");
    assert_eq!(echo(&at(&s, &b), "on b").await, "on b", "{}", b.log());
    assert_eq!(
        host_initializes(&fx),
        1,
        "one backend session for the host session"
    );
    let ids = call_sessions(&fx);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(
        ids[0], ids[1],
        "both replicas call the same backend session"
    );

    // The record holds it sealed: the backend's id is a bearer secret.
    let records = redis.keys("mcpg:*:rec");
    assert_eq!(records.len(), 1, "{records:?}");
    let fields = redis.cli(&["HGETALL", &records[0]]);
    assert!(fields.contains("up:web"), "{fields}");
    assert!(!fields.contains(&ids[0]), "not in clear: {fields}");
}

#[tokio::test]
async fn a_forgotten_backend_session_is_initialized_once_and_the_new_id_reaches_a() {
    let (_redis, fx, a, b) = setup().await;
    let s = session(&a).await;
    assert_eq!(echo(&s, "first").await, "first");
    let on_b = at(&s, &b);
    assert_eq!(echo(&on_b, "second").await, "second");
    let old = call_sessions(&fx)[0].clone();

    fx.drop_sessions();
    assert_eq!(echo(&on_b, "after").await, "after", "{}", b.log());
    assert_eq!(host_initializes(&fx), 2, "re-initialized once");
    let renewed = call_sessions(&fx).last().cloned().unwrap();
    assert_ne!(renewed, old);

    assert_eq!(echo(&s, "on a again").await, "on a again", "{}", a.log());
    assert_eq!(
        host_initializes(&fx),
        2,
        "A takes the recorded id instead of initializing"
    );
    let ids = call_sessions(&fx);
    assert_eq!(ids.last(), Some(&renewed), "{ids:?}");
}

#[tokio::test]
async fn a_delete_on_b_ends_the_backend_session_once() {
    let (_redis, fx, a, b) = setup().await;
    let s = session(&a).await;
    assert_eq!(echo(&s, "on a").await, "on a");
    let on_b = at(&s, &b);
    assert_eq!(echo(&on_b, "on b").await, "on b");
    let upstream = call_sessions(&fx)[0].clone();

    assert_eq!(on_b.delete().await.status.as_u16(), 200);
    // A hears of the end and lets its connection go; give both time.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deletes = fx
        .log()
        .into_iter()
        .filter(|r| r.http_method == "DELETE")
        .filter(|r| r.header("mcp-session-id") == Some(upstream.as_str()))
        .count();
    assert_eq!(
        deletes,
        1,
        "{:?}",
        fx.log().iter().map(|r| &r.http_method).collect::<Vec<_>>()
    );
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let status = s.post(&[], ping).await.status.as_u16();
    assert_eq!(status, 404, "the session ended on A too");
}

#[tokio::test]
async fn a_delete_on_a_replica_that_never_called_the_backend_ends_it_too() {
    let (_redis, fx, a, b) = setup().await;
    let s = session(&a).await;
    let on_b = at(&s, &b);
    // B holds the session (restored before the backend session existed).
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(on_b.post(&[], ping).await.status.as_u16(), 200);
    assert_eq!(echo(&s, "on a").await, "on a");
    let upstream = call_sessions(&fx)[0].clone();

    assert_eq!(on_b.delete().await.status.as_u16(), 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deletes: Vec<_> = fx
        .log()
        .into_iter()
        .filter(|r| r.http_method == "DELETE")
        .filter_map(|r| r.header("mcp-session-id").map(str::to_owned))
        .collect();
    assert_eq!(deletes, vec![upstream], "B ends what A opened, A does not");
}

#[tokio::test]
async fn replicas_racing_to_open_the_backend_session_end_up_on_one() {
    let (_redis, fx, a, b) = setup().await;
    let s = session(&a).await;
    let on_b = at(&s, &b);
    let (x, y) = tokio::join!(echo(&s, "a"), echo(&on_b, "b"));
    assert_eq!((x.as_str(), y.as_str()), ("a", "b"));
    let ids = call_sessions(&fx);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(
        ids[0], ids[1],
        "the loser adopted the winner's backend session"
    );
    // The loser's own backend session, if the two did race, is ended.
    let opened = host_initializes(&fx);
    let ended: Vec<_> = fx
        .log()
        .into_iter()
        .filter(|r| r.http_method == "DELETE")
        .filter_map(|r| r.header("mcp-session-id").map(str::to_owned))
        .collect();
    assert_eq!(ended.len(), opened - 1, "{ended:?}");
    assert!(!ended.contains(&ids[0]), "{ended:?}");
    // Both go on calling it.
    assert_eq!(echo(&s, "a2").await, "a2");
    assert_eq!(echo(&on_b, "b2").await, "b2");
    let ids = call_sessions(&fx);
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
}
