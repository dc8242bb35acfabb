//! Owner-bound requests when a store reply is late (issue 11 item 4, review
//! findings 1 and 2): a proxy in front of the real `redis-server` holds back
//! one replica's replies after a chosen command, which Redis runs at once. A
//! handed request then still runs exactly once, and the host gets an answer.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::proxy::RedisProxy;
use common::served::Served;
use common::store::{TestRedis, at, echo_within, per_session_fx, replica_at};
use common::{McpClient, TestDir, logged_calls, text_of};
use serde_json::{Value, json};

/// How often `tools/call` of `fx__echo` ran with `text`.
fn runs(log: &Path, text: &str) -> usize {
    logged_calls(log, "echo")
        .iter()
        .filter(|e| e["msg"]["params"]["arguments"]["text"] == text)
        .count()
}

/// Redis, a proxy in front of it, owner A and replica B (the one named
/// `behind` speaks to Redis through the proxy), a session owned by A.
async fn setup(
    behind: &str,
) -> (
    TestRedis,
    RedisProxy,
    TestDir,
    PathBuf,
    Served,
    Served,
    McpClient,
) {
    let redis = TestRedis::start().await;
    let proxy = RedisProxy::start(redis.port).await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let url = |name: &str| {
        if name == behind {
            proxy.url.clone()
        } else {
            redis.url()
        }
    };
    let a = replica_at(Some(&url("a")), &per_session_fx(&log)).await;
    let b = replica_at(Some(&url("b")), &per_session_fx(&log)).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let r = s.call_tool("fx__echo", json!({"text": "claim"})).await;
    assert_eq!(text_of(&r.response), "claim", "{}", r.response);
    (redis, proxy, dir, log, a, b, s)
}

#[tokio::test]
async fn a_send_whose_reply_is_late_runs_once() {
    let (_redis, proxy, _dir, log, a, b, s) = setup("b").await;
    // B's send reaches Redis (A picks the call up) but its reply misses the
    // deadline: B must not run the call itself as if it was never sent.
    proxy.hold_replies_after("'k', 'call'", Duration::from_millis(900));
    let r = echo_within(&at(&s, &b), "late send").await;
    assert!(proxy.fired(), "the send went through the proxy");
    let ran = runs(&log, "late send");
    if r.get("result").is_some() {
        assert_eq!(text_of(&r), "late send", "{r}");
        assert_eq!(ran, 1, "ran once:\nA:\n{}\nB:\n{}", a.log(), b.log());
    } else {
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert_eq!(ran, 0, "an error says not run, or may have run: {r}");
    }
    assert!(ran <= 1, "never twice: {ran}");
}

#[tokio::test]
async fn a_pickup_whose_reply_is_late_still_answers_the_host() {
    let (_redis, proxy, _dir, log, a, b, s) = setup("a").await;
    // A's pickup runs in Redis (B sees the mark and follows) but its reply
    // misses the deadline: A must learn it landed and run the call.
    proxy.hold_replies_after("'sq', '0'", Duration::from_millis(900));
    let r = echo_within(&at(&s, &b), "late pickup").await;
    assert!(proxy.fired(), "the pickup went through the proxy");
    assert_eq!(text_of(&r), "late pickup", "{r}\nA:\n{}", a.log());
    assert_eq!(runs(&log, "late pickup"), 1, "ran once");
    // The session goes on normally afterwards.
    let r = echo_within(&at(&s, &b), "after").await;
    assert_eq!(text_of(&r), "after", "{r}");
}

#[tokio::test]
async fn progress_mirrored_while_the_store_stalls_reaches_the_host() {
    let (_redis, proxy, _dir, _log, a, b, s) = setup("a").await;
    // The owner's first progress event reaches Redis but its reply misses
    // the deadline: the store counts as down for about a second, while the
    // next events come. They are retried in order, not lost.
    proxy.hold_replies_after("sq\r\n$1\r\n1\r\n", Duration::from_millis(900));
    let on_b = at(&s, &b);
    let r = tokio::time::timeout(Duration::from_secs(20), c_progress(&on_b))
        .await
        .expect("an answer within 20 s");
    assert!(proxy.fired(), "the first event went through the proxy");
    assert_eq!(text_of(&r.response), "progressed 5", "{}", r.response);
    let progress: Vec<&Value> = r
        .related
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"]["progress"])
        .collect();
    assert_eq!(progress.len(), 5, "{progress:?}\nA:\n{}", a.log());
    let mut sorted = progress.clone();
    sorted.sort_by(|x, y| x.as_f64().partial_cmp(&y.as_f64()).unwrap());
    assert_eq!(progress, sorted, "in order");
}

/// `fx__slow_progress` of 5 steps, 100 ms apart, through `c`.
async fn c_progress(c: &McpClient) -> common::Rpc {
    c.request(
        "tools/call",
        json!({"name": "fx__slow_progress", "arguments": {"n": 5, "interval_ms": 100},
               "_meta": {"progressToken": "p1"}}),
    )
    .await
}

#[tokio::test]
async fn a_cancel_that_overtakes_the_handed_request_still_cancels_it() {
    let (_redis, proxy, _dir, log, a, b, s) = setup("a").await;
    // A's pickup runs in Redis but its reply (and what follows on that
    // connection: the cancel's broadcast) comes 900 ms late: A registers the
    // request only after the cancel arrived.
    proxy.hold_replies_after("'sq', '0'", Duration::from_millis(900));
    let on_b = at(&s, &b);
    let call = json!({"jsonrpc": "2.0", "id": 78, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 3}}});
    let mut stream = on_b.open(&call).await;
    assert_eq!(stream.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(proxy.fired(), "the pickup went through the proxy");
    on_b.notify(
        "notifications/cancelled",
        Some(json!({"requestId": 78, "reason": "test"})),
    )
    .await;
    assert_eq!(
        stream.next(Duration::from_secs(5)).await,
        None,
        "no result after a cancel:\n{}",
        a.log()
    );
    assert!(
        a.logged_message("a cancel that came before its request applied"),
        "{}",
        a.log()
    );
    assert!(
        logged_calls(&log, "sleep").is_empty(),
        "never started at the child"
    );
}
