//! What a session's owner replica keeps that must outlive it (`[cluster]
//! redis`, issue 11): the session's subscriptions on a per-session stdio
//! backend are recorded, so the replica that adopts the session subscribes
//! its new child again; and a draining replica hands a session's requests
//! to a live owner rather than take it (its child would stop with it), taking
//! only what nobody owns. A real `redis-server`, two `mcpgate serve` replicas A
//! and B with the same keys, the fake stdio backend in per-session mode with
//! subscriptions, logging every message it receives (with its pid) to one
//! file.

mod common;

use std::path::Path;
use std::time::Duration;

use common::served::Served;
use common::store::{KEYS, TestRedis, at};
use common::{McpClient, TestDir, logged, logged_calls, text_of};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// `mcpgate serve` sharing `redis` (200 ms heartbeat, `drain_delay`) with
/// backend `fx`: the fake stdio backend with subscriptions, one child per
/// session, logging to `log`.
async fn replica(redis: &TestRedis, log: &Path, drain_delay: &str) -> Served {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         shutdown_grace = \"8s\"\ndrain_delay = \"{drain_delay}\"\n\
         [cluster]\nredis = \"{}\"\nheartbeat = \"200ms\"\n\
         [backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--subscribe\", \"--log\", \"{}\"]\nmode = \"per_session\"\n\
         on_owner_loss = \"respawn\"\n",
        redis.url(),
        log.display()
    );
    Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", KEYS)]).await
}

/// The session record's fields, as `redis-cli HGETALL` prints them.
fn record(redis: &TestRedis) -> String {
    let records = redis.keys("mcpg:*:rec");
    assert_eq!(records.len(), 1, "{records:?}");
    redis.cli(&["HGETALL", &records[0]])
}

/// The pids of the children that received `method`.
fn pids_of(log: &Path, method: &str) -> Vec<u64> {
    logged(log, method)
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect()
}

#[tokio::test]
async fn an_adopter_subscribes_the_new_child_again() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica(&redis, &log, "0s").await;
    let b = replica(&redis, &log, "0s").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let r = s.call_tool("fx__echo", json!({"text": "claim"})).await;
    assert_eq!(text_of(&r.response), "claim", "{}", r.response);

    // A owns the session: its subscribe costs one Redis command.
    let evals = redis.calls("eval");
    let r = s
        .request("resources/subscribe", json!({"uri": "fx+fx://static"}))
        .await;
    assert_eq!(r.response["result"], json!({}), "{}", r.response);
    assert_eq!(redis.calls("eval") - evals, 1, "one write");
    assert!(
        record(&redis).contains("sub:fx:fx://static"),
        "{}",
        record(&redis)
    );
    let first = pids_of(&log, "resources/subscribe");

    a.signal(Signal::SIGKILL);
    drop(a);
    let on_b = at(&s, &b);
    let mut updates = on_b.get_stream().await;
    // The first call through B adopts the session: the new child is
    // subscribed again before the call runs, so the update (announced for
    // subscribed URIs only) reaches the host.
    let r = on_b
        .call_tool("fx__touch", json!({"uri": "fx://static"}))
        .await;
    assert_eq!(text_of(&r.response), "touched", "{}", r.response);
    let mut got = Vec::new();
    while let Some(m) = updates.next(Duration::from_millis(1500)).await {
        if m["method"] == "notifications/resources/updated" {
            got.push(m["params"]["uri"].clone());
        }
    }
    assert_eq!(got, [json!("fx+fx://static")], "{}", b.log());
    let touched: Vec<u64> = logged_calls(&log, "touch")
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    let subscribed = pids_of(&log, "resources/subscribe");
    assert_eq!(subscribed.len(), 2, "{subscribed:?}");
    assert_ne!(subscribed[1], first[0], "a new child");
    assert_eq!(touched, [subscribed[1]], "subscribed again, then touched");

    // Unsubscribing through the new owner forgets it in the record too.
    let r = on_b
        .request("resources/unsubscribe", json!({"uri": "fx+fx://static"}))
        .await;
    assert_eq!(r.response["result"], json!({}), "{}", r.response);
    assert!(!record(&redis).contains("sub:"), "{}", record(&redis));
}

/// `fx__echo` of `text` through `c`: the HTTP status and the response.
async fn echo_status(c: &McpClient, text: &str) -> (u16, Option<String>, Value) {
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "fx__echo", "arguments": {"text": text}}});
    let raw = c.post(&[], call.to_string()).await;
    let retry = raw.header("retry-after").map(str::to_owned);
    let body = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
    (raw.status.as_u16(), retry, body)
}

#[tokio::test]
async fn a_draining_replica_hands_to_a_live_owner_and_serves_what_nobody_owns() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica(&redis, &log, "5s").await;
    let b = replica(&redis, &log, "0s").await;
    // Two sessions held by A: B owns the first one's child, nobody the second's.
    let mut owned = McpClient::new(&a.url);
    owned.initialize(json!({})).await;
    let r = at(&owned, &b)
        .call_tool("fx__echo", json!({"text": "on b"}))
        .await;
    assert_eq!(text_of(&r.response), "on b", "{}", r.response);
    let mut free = McpClient::new(&a.url);
    free.initialize(json!({})).await;
    a.signal(Signal::SIGTERM);
    assert!(
        common::wait_for(Duration::from_secs(3), || a.logged_message("draining")).await,
        "{}",
        a.log()
    );
    // Draining, A hands the owned session's request to B's child (it starts
    // no child of its own that would stop with it a moment later)...
    let (status, _, body) = echo_status(&owned, "via a").await;
    assert_eq!(status, 200, "{body}\n{}", a.log());
    assert_eq!(text_of(&body), "via a", "{body}");
    let pids: Vec<u64> = logged_calls(&log, "echo")
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_eq!(pids[0], pids[1], "one child, B's: {pids:?}");
    // ...and serves the session nobody owns rather than fail the host's call
    // (it did answer 503: a failed call at a rolling restart).
    let (status, retry, body) = echo_status(&free, "nobody's").await;
    assert_eq!(status, 200, "{body}\n{}", a.log());
    assert_eq!(retry, None);
    assert_eq!(text_of(&body), "nobody's", "{body}");
    let pids: Vec<u64> = logged_calls(&log, "echo")
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert_ne!(pids[2], pids[0], "a child of A's: {pids:?}");
    assert!(
        a.logged_message("this one drains: served here"),
        "{}",
        a.log()
    );
}
