//! The standalone GET stream re-attaches on another replica (issue 11,
//! acceptance 2 and 3), with real processes: a real `redis-server`, two
//! `mcpgate serve` replicas with the same keys and store, the fake stdio
//! backend per session (its `log_later` tool sends a log unrelated to any
//! request, which goes on the standalone stream). A `GET` + `Last-Event-ID`
//! of a stream that A produced is answered on B with what the store holds
//! after that id and then B's own notifications on the same stream, with ids
//! that keep increasing (no gap, no repeat); after A is killed within 2 s; A,
//! still alive, stops numbering a stream B took over; an id whose events the
//! store lost gets a new stream from now (200, not 410); another session's id
//! is 410.

mod common;

use std::time::Duration;

use common::store::{TestRedis, at, replica};
use common::{McpClient, SseStream, TestDir};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

/// A per-session fake backend `mine` offering `log_later`.
fn backends(dir: &TestDir) -> String {
    let tools = dir.path("tools.json");
    let defs = json!([{"name": "log_later", "inputSchema": {"type": "object"}}]);
    std::fs::write(&tools, defs.to_string()).unwrap();
    format!(
        "[backends.mine]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--tools-json\", \"{}\"]\nmode = \"per_session\"\n",
        tools.display()
    )
}

/// Has the session's backend send the log `text` on the standalone stream.
async fn log_later(s: &McpClient, text: &str) {
    let r = s
        .call_tool("mine__log_later", json!({"delay_ms": 20, "text": text}))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "later");
}

/// The next log's text on `stream`, and its event id.
async fn next_log(stream: &mut SseStream) -> Option<(String, String)> {
    loop {
        let m: Value = stream.next(Duration::from_secs(5)).await?;
        if m["method"] == "notifications/message" {
            let id = stream.event_ids.last().cloned().unwrap_or_default();
            return Some((m["params"]["data"].as_str()?.to_owned(), id));
        }
    }
}

/// `{stream}-{seq}` as numbers.
fn id(event_id: &str) -> (u64, u64) {
    let (a, b) = event_id.split_once('-').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[tokio::test]
async fn a_get_stream_re_attaches_on_b_within_2_s_after_a_is_killed() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let a = replica(Some(&redis), &backends(&dir)).await;
    let b = replica(Some(&redis), &backends(&dir)).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);

    let mut get = s.get_stream().await;
    assert_eq!(get.status, 200);
    log_later(&s, "one").await;
    let (text, last) = next_log(&mut get).await.expect("a log on A's GET stream");
    assert_eq!(text, "one");
    a.signal(Signal::SIGKILL);
    let killed = Instant::now();
    drop(get);

    let mut resumed = on_b.resume(&last).await;
    assert_eq!(resumed.status, 200, "{}", b.log());
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed.elapsed()
    );
    log_later(&on_b, "two").await;
    let (text, next) = next_log(&mut resumed)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert_eq!(text, "two");
    let ((s0, q0), (s1, q1)) = (id(&last), id(&next));
    assert_eq!(
        (s1, q1),
        (s0, q0 + 1),
        "the same stream, the next id: {last} then {next}"
    );
}

#[tokio::test]
async fn missed_events_are_replayed_and_a_takes_nothing_back() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let a = replica(Some(&redis), &backends(&dir)).await;
    let b = replica(Some(&redis), &backends(&dir)).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);

    let mut get = s.get_stream().await;
    log_later(&s, "one").await;
    let (_, seen) = next_log(&mut get).await.expect("one");
    drop(get);
    // Sent while the host is away: queued on A, mirrored.
    log_later(&s, "two").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut ids = vec![seen.clone()];
    let mut on_b_get = on_b.resume(&seen).await;
    assert_eq!(on_b_get.status, 200, "{}", b.log());
    let (text, i) = next_log(&mut on_b_get)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert_eq!(text, "two", "replayed from the store");
    ids.push(i);
    log_later(&on_b, "three").await;
    let (text, i) = next_log(&mut on_b_get).await.expect("B's own log");
    assert_eq!(text, "three");
    ids.push(i);
    drop(on_b_get);

    // A, still alive, still has the session's backend: what it sends now is
    // unrelated and unheard (the host listens on B); A must not number it on
    // the stream B continues.
    log_later(&s, "four").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = ids.last().unwrap().clone();
    let mut back_on_a = s.resume(&last).await;
    assert_eq!(back_on_a.status, 200, "{}", a.log());
    log_later(&s, "five").await;
    let (text, i) = next_log(&mut back_on_a)
        .await
        .unwrap_or_else(|| panic!("{}", a.log()));
    assert_eq!(text, "five", "nothing A numbered while B held the stream");
    ids.push(i);

    let parsed: Vec<(u64, u64)> = ids.iter().map(|i| id(i)).collect();
    assert!(parsed.iter().all(|p| p.0 == parsed[0].0), "{ids:?}");
    let seqs: Vec<u64> = parsed.iter().map(|p| p.1).collect();
    let first = seqs[0];
    assert_eq!(
        seqs,
        (first..first + 4).collect::<Vec<_>>(),
        "no gap, no repeat: {ids:?}"
    );
}

#[tokio::test]
async fn lost_events_give_a_new_stream_and_another_sessions_id_is_410() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let a = replica(Some(&redis), &backends(&dir)).await;
    let b = replica(Some(&redis), &backends(&dir)).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);

    let mut get = s.get_stream().await;
    log_later(&s, "one").await;
    let (_, seen) = next_log(&mut get).await.expect("one");
    drop(get);

    // Another session's id at B: refused, none of this session's events.
    let mut other = McpClient::new(&b.url);
    other.initialize(json!({})).await;
    let foreign = other.resume(&seen).await;
    assert_eq!(foreign.status, 410);

    // The store loses the events after the host's id: a new stream from now.
    log_later(&s, "two").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for key in redis.keys("mcpg:*:ev") {
        redis.cli(&["DEL", &key]);
    }
    let mut fresh = on_b.resume(&seen).await;
    assert_eq!(fresh.status, 200, "{}", b.log());
    log_later(&on_b, "three").await;
    let (text, i) = next_log(&mut fresh)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert_eq!(text, "three", "starts from now");
    assert_ne!(id(&i).0, id(&seen).0, "a new stream number");
    let primed = fresh.raw_events.first().expect("events");
    assert!(primed.data.is_empty(), "a new stream is primed");
}
