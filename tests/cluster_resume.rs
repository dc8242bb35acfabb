//! SSE resumption on any replica, with real processes: a real `redis-server`,
//! two `mcpgate serve` replicas with the same keys and store, the fake stdio
//! backend per session. A POST stream that A produces is resumed with
//! `Last-Event-ID` on B: the rest of its events and the result, nothing twice,
//! while A is still producing and after it finished; an event id of another
//! session's stream is 410 there; a stream whose replica is killed before the
//! result ends on B with a terminal -32603 error within seconds, and the call is
//! not run again. A JSON answer mirrors nothing (no Redis command); what is
//! mirrored is sealed. B reads the mirror when A rings the session's doorbell
//! with an event, not by polling.

mod common;

use std::time::Duration;

use common::McpClient;
use common::logged_calls;
use common::store::{FX_LOGGED, TestRedis, at, replica};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How many times Redis executed `command` so far (`INFO commandstats`).
fn calls(redis: &TestRedis, command: &str) -> u64 {
    redis.calls(command)
}

/// A `tools/call` of `fx__slow_progress` (`n` progress notifications,
/// `every_ms` apart) asking for progress.
fn progress_call(id: i64, n: u64, every_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "fx__slow_progress", "arguments": {"n": n, "interval_ms": every_ms},
                      "_meta": {"progressToken": "p"}}})
}

/// Reads `stream` to its end: the progress values, and the final message.
async fn drain(stream: &mut common::SseStream) -> (Vec<u64>, Option<Value>) {
    let mut progress = Vec::new();
    while let Some(m) = stream.next(Duration::from_secs(5)).await {
        if m["method"] == "notifications/progress" {
            progress.push(m["params"]["progress"].as_u64().unwrap());
        } else if m.get("id").is_some() {
            return (progress, Some(m));
        }
    }
    (progress, None)
}

#[tokio::test]
async fn a_stream_produced_on_a_resumes_on_b() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let b = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);

    // A JSON answer mirrors nothing. (The first call starts the backend and
    // may take longer than the JSON window: then it is an SSE stream.)
    let mut json_answers = 0;
    for i in 0..10 {
        let xadds = calls(&redis, "xadd");
        let echo = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
                          "params": {"name": "fx__echo", "arguments": {"text": "hi"}}});
        let mut answer = s.open(&echo).await;
        let sse = answer.is_sse();
        let m = answer
            .next(Duration::from_secs(5))
            .await
            .expect("an answer");
        assert!(m.get("result").is_some(), "{m}");
        if !sse {
            json_answers += 1;
            assert_eq!(
                calls(&redis, "xadd"),
                xadds,
                "no Redis command for a JSON answer"
            );
        }
    }
    assert!(json_answers >= 5, "{json_answers} JSON answers of 10");

    // Resumed on B while A still produces: the rest, live, nothing twice.
    let mut stream = s.open(&progress_call(7, 8, 150)).await;
    assert!(stream.is_sse());
    let first = stream.next(Duration::from_secs(5)).await.expect("progress");
    assert_eq!(first["params"]["progress"], 1, "{first}");
    let last_id = stream.event_ids.last().unwrap().clone();
    drop(stream);
    let mut resumed = on_b.resume(&last_id).await;
    assert_eq!(resumed.status, 200, "{}", b.log());
    let (progress, done) = drain(&mut resumed).await;
    assert_eq!(
        progress,
        (2..=8).collect::<Vec<_>>(),
        "the rest, in order, once"
    );
    let done = done.unwrap_or_else(|| panic!("no result on B:\n{}", b.log()));
    assert_eq!(done["id"], 7);
    assert_eq!(done["result"]["content"][0]["text"], "progressed 8");
    let ids = &resumed.event_ids;
    assert!(
        ids.iter()
            .all(|id| id.split('-').next() == last_id.split('-').next())
    );

    // Resumed on B after A finished: replayed from the store, then the end.
    let mut stream = s.open(&progress_call(8, 3, 100)).await;
    stream.next(Duration::from_secs(5)).await.expect("progress");
    let last_id = stream.event_ids.last().unwrap().clone();
    let (_, done) = drain(&mut stream).await;
    assert!(done.is_some());
    let mut resumed = on_b.resume(&last_id).await;
    let (progress, done) = drain(&mut resumed).await;
    assert_eq!(progress, vec![2, 3]);
    assert_eq!(done.expect("the result")["id"], 8);

    // What Redis holds is sealed: no tool result in clear.
    let ev = redis.keys("mcpg:*:ev");
    assert_eq!(ev.len(), 1, "{ev:?}");
    let entries = redis.cli(&["XRANGE", &ev[0], "-", "+"]);
    assert!(entries.contains("sq"), "{entries}");
    assert!(!entries.contains("progressed"), "{entries}");

    // Another session's event id on B: 410, none of that session's events.
    let mut other = McpClient::new(&b.url);
    other.initialize(json!({})).await;
    let foreign = other.resume(&last_id).await;
    assert_eq!(foreign.status, 410);
}

#[tokio::test]
async fn a_resumed_stream_reads_the_mirror_when_the_producer_rings_not_by_polling() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let b = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut stream = s.open(&progress_call(5, 8, 200)).await;
    assert!(stream.is_sse());
    stream.next(Duration::from_secs(5)).await.expect("progress");
    let last_id = stream.event_ids.last().unwrap().clone();
    drop(stream);

    let (xranges, xadds, publishes) = (
        calls(&redis, "xrange"),
        calls(&redis, "xadd"),
        calls(&redis, "publish"),
    );
    let mut resumed = at(&s, &b).resume(&last_id).await;
    let (progress, done) = drain(&mut resumed).await;
    assert_eq!(progress, (2..=8).collect::<Vec<_>>());
    assert!(done.is_some(), "{}", b.log());
    // 8 events in 1.6 s: the resume's read, one read per ring (at most 8)
    // and the fallback's (1 s) — not a poll every few ms after each event
    // (about 7 per event).
    let reads = calls(&redis, "xrange") - xranges;
    assert!(reads <= 1 + 1 + 8 + 2, "{reads} reads of the mirror");
    let mirrored = calls(&redis, "xadd") - xadds;
    assert_eq!(
        calls(&redis, "publish") - publishes,
        mirrored,
        "one ring each"
    );
}

#[tokio::test]
async fn a_stream_whose_replica_dies_ends_on_b_with_an_error() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let b = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);

    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "fx__slow_progress", "arguments": {"n": 100, "interval_ms": 200},
                                 "_meta": {"progressToken": "p"}}});
    let mut stream = s.open(&call).await;
    stream.next(Duration::from_secs(5)).await.expect("progress");
    let last_id = stream.event_ids.last().unwrap().clone();
    let log = a.dir.path("fx.log");
    assert_eq!(logged_calls(&log, "slow_progress").len(), 1);
    a.signal(Signal::SIGKILL);
    drop(stream);

    let killed = Instant::now();
    let mut resumed = on_b.resume(&last_id).await;
    assert_eq!(resumed.status, 200, "{}", b.log());
    let (_, done) = drain(&mut resumed).await;
    let done = done.unwrap_or_else(|| panic!("no end on B:\n{}", b.log()));
    assert_eq!(done["id"], 9, "{done}");
    assert_eq!(done["error"]["code"], -32603, "{done}");
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    assert!(
        !b.dir.path("fx.log").exists()
            || logged_calls(&b.dir.path("fx.log"), "slow_progress").is_empty(),
        "never run again"
    );
    // Another resumer sees the same end.
    let mut again = on_b.resume(&last_id).await;
    let (_, done) = drain(&mut again).await;
    assert_eq!(done.expect("the same end")["error"]["code"], -32603);
}
