//! What a session's per-session stdio child lists for that session alone is
//! what every replica lists for it (`[cluster] redis`, issue 11): a real
//! `redis-server`, two `mcpgate serve` replicas with the same keys, the demo
//! server per session (its `toggle_bonus` adds a tool, a resource and a
//! prompt to its own lists). The owner marks the session's record (`ol`) and
//! tells the other replicas (a replica loading the record later reads it),
//! which hand its list requests to the owner, cursors and all; a
//! session without such lists costs no Redis command per list anywhere; a
//! dead owner's lists die with it.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{KEYS, TestRedis, at};
use common::{McpClient, text_of};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// A replica sharing `redis` (200 ms heartbeat) with the demo server as a
/// per-session stdio backend `demo`, two items a page (so lists take pages).
async fn replica(redis: &TestRedis) -> Served {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         shutdown_grace = \"2s\"\nsession_idle_timeout = \"10m\"\npage_size = 2\n\
         [cluster]\nredis = \"{}\"\nheartbeat = \"200ms\"\n\
         [backends.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-server\"]\n\
         mode = \"per_session\"\n",
        redis.url(),
        env!("CARGO_BIN_EXE_mcpgate")
    );
    Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", KEYS)]).await
}

/// The three lists that `toggle_bonus` changes, with the key of their items.
const LISTS: [(&str, &str); 3] = [
    ("tools/list", "tools"),
    ("prompts/list", "prompts"),
    ("resources/list", "resources"),
];

/// Every item of list `method` (`key`), the pages asked of the replicas in
/// `clients` in turn (a cursor one replica handed out followed on the next).
async fn list_across(clients: &[&McpClient], method: &str, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..200 {
        let params = cursor
            .as_ref()
            .map_or(json!({}), |c| json!({ "cursor": c }));
        let r = clients[page % clients.len()].request(method, params).await;
        let result = r.result();
        assert!(result.is_object(), "{method} page {page}: {}", r.response);
        out.extend(result[key].as_array().cloned().unwrap_or_default());
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
    panic!("{method}: more than 200 pages");
}

/// Whether any item of `items` is a bonus item: the tool `bonus_echo`, the
/// prompt `bonus_prompt`, the resource `demo://bonus` (as exposed).
fn has_bonus(items: &[Value]) -> bool {
    items.iter().any(|i| {
        let name = i["name"].as_str().unwrap_or_default();
        name.ends_with("bonus_echo")
            || name.ends_with("bonus_prompt")
            || i["uri"].as_str().is_some_and(|u| u.contains("bonus"))
    })
}

/// Whether each of the three lists through `clients` has the bonus item.
async fn bonus_in_lists(clients: &[&McpClient]) -> [bool; 3] {
    let mut out = [false; 3];
    for (i, (method, key)) in LISTS.into_iter().enumerate() {
        out[i] = has_bonus(&list_across(clients, method, key).await);
    }
    out
}

/// Calls `toggle_bonus` through `c` and waits for the tools' `list_changed`
/// on `stream` (the session's standalone stream).
async fn toggle(c: &McpClient, stream: &mut common::SseStream, on: bool) {
    let r = c.call_tool("demo__toggle_bonus", json!({})).await;
    let said = if on { "added" } else { "removed" };
    assert!(text_of(&r.response).contains(said), "{}", r.response);
    for _ in 0..20 {
        let n = stream.next(Duration::from_secs(10)).await;
        let n = n.unwrap_or_else(|| panic!("no list_changed after toggle_bonus ({said})"));
        if n["method"] == "notifications/tools/list_changed" {
            return;
        }
    }
    panic!("no tools list_changed after toggle_bonus ({said})");
}

/// The record key of the only session in `redis`.
fn record(redis: &TestRedis) -> String {
    let keys = redis.keys("mcpg:*:rec");
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys[0].clone()
}

/// Polls until `f` says the bonus is (`on`) or is not in every list, up to
/// 2 s: the broadcast reaches the other replica a moment after the
/// announcement may reach the host.
async fn lists_become(clients: &[&McpClient], on: bool) -> [bool; 3] {
    let end = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let seen = bonus_in_lists(clients).await;
        if seen == [on; 3] || tokio::time::Instant::now() > end {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asks every list of [`LISTS`] through each of `clients`; each answers a result.
async fn list_all(clients: &[&McpClient]) {
    for c in clients {
        for (method, _) in LISTS {
            let r = c.request(method, json!({})).await;
            assert!(r.result().is_object(), "{}", r.response);
        }
    }
}

#[tokio::test]
async fn every_replica_lists_what_the_owners_child_lists_for_the_session() {
    let redis = TestRedis::start().await;
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);
    let mut stream = s.get_stream().await;
    assert_eq!(bonus_in_lists(&[&on_b]).await, [false; 3], "no bonus yet");

    // Toggled on A (A owns the session): A's child lists the bonus items.
    toggle(&s, &mut stream, true).await;
    assert_eq!(bonus_in_lists(&[&s]).await, [true; 3], "on A, the owner");
    assert_eq!(lists_become(&[&on_b], true).await, [true; 3], "on B");
    assert_eq!(
        lists_become(&[&on_b, &s], true).await,
        [true; 3],
        "pages from B and A in turn"
    );
    assert_eq!(redis.cli(&["HGET", &record(&redis), "ol"]), "demo");
    let r = on_b
        .call_tool("demo__bonus_echo", json!({"text": "hi"}))
        .await;
    assert_eq!(text_of(&r.response), "bonus: hi", "{}", r.response);
    // A replica that loads the session's record now reads the mark with it.
    let c = replica(&redis).await;
    let on_c = at(&s, &c);
    assert_eq!(bonus_in_lists(&[&on_c]).await, [true; 3], "on C, loaded");

    // Toggled back through B (the call runs on A): gone on all three.
    toggle(&on_b, &mut stream, false).await;
    assert_eq!(bonus_in_lists(&[&s]).await, [false; 3], "on A");
    assert_eq!(lists_become(&[&on_b], false).await, [false; 3], "on B");
    assert_eq!(lists_become(&[&on_c], false).await, [false; 3], "on C");
    assert_eq!(redis.cli(&["HEXISTS", &record(&redis), "ol"]), "0");

    // No lists of its own: a list costs no Redis command on either replica.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = redis.request_commands();
    list_all(&[&on_b, &s]).await;
    assert_eq!(
        redis.request_commands(),
        before,
        "lists cost no store command"
    );
    let mut fresh = McpClient::new(&b.url);
    fresh.initialize(json!({})).await;
    let fresh_on_a = at(&fresh, &a);
    // A loads the session's record once (`HGETALL`, and slides its expiry).
    let r = fresh_on_a.request("ping", json!({})).await;
    assert!(r.result().is_object(), "{}", r.response);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = redis.request_commands();
    list_all(&[&fresh, &fresh_on_a]).await;
    assert_eq!(redis.request_commands(), before, "a new session's lists");
}

#[tokio::test]
async fn a_dead_owners_lists_die_with_it() {
    let redis = TestRedis::start().await;
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);
    let mut stream = s.get_stream().await;
    toggle(&s, &mut stream, true).await;
    assert_eq!(lists_become(&[&on_b], true).await, [true; 3], "on B");

    a.signal(Signal::SIGKILL);
    drop(a);
    // The owner is gone: B lists the catalogue, then adopts the session on a
    // call; its new child lists afresh.
    assert_eq!(bonus_in_lists(&[&on_b]).await, [false; 3], "owner dead");
    let r = on_b.call_tool("demo__echo", json!({"text": "x"})).await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    assert_eq!(bonus_in_lists(&[&on_b]).await, [false; 3], "adopted");
    assert_eq!(redis.cli(&["HEXISTS", &record(&redis), "ol"]), "0");
}
