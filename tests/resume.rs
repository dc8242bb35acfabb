//! Resumable SSE, including a `Last-Event-ID` that is malformed, from another
//! session or expired: a POST stream cut by the host mid-call resumes with `GET` +
//! `Last-Event-ID`, replaying only that stream's later events and the final
//! response; a resume that cannot be honoured is 400 or 410, never an empty 200;
//! 2025-11-25 POST streams start with the priming event; unrelated messages queued
//! while no GET stream is open arrive when one opens.

mod common;

use std::time::Duration;

use common::{McpClient, SseStream, TestDir, TestGateway};
use serde_json::{Value, json};

const FX: &str = r#"
[server]
metrics_listen = "off"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
"#;

fn slow_progress(id: i64, n: u64, interval_ms: u64, token: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "fx__slow_progress", "arguments": {"n": n, "interval_ms": interval_ms},
        "_meta": {"progressToken": token}}})
}

/// Messages until the response with `id` (inclusive); panics if it never comes.
async fn until_response(stream: &mut SseStream, id: i64) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let m = stream
            .next(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("stream ended before response {id}: {out:?}"));
        let done = m.get("method").is_none() && m["id"] == id;
        out.push(m);
        if done {
            return out;
        }
    }
}

fn progress(msgs: &[Value]) -> Vec<f64> {
    msgs.iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect()
}

fn stream_of(event_id: &str) -> &str {
    event_id.split_once('-').unwrap().0
}

#[tokio::test]
async fn a_cut_post_stream_resumes_with_only_its_own_later_events_and_the_response() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let mut cut = s.open(&slow_progress(1, 8, 120, "mine")).await;
    assert!(cut.is_sse());
    let first = cut.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(first["params"]["progress"], 1, "{first}");
    let second = cut.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(second["params"]["progress"], 2, "{second}");
    let last_id = cut.event_ids.last().unwrap().clone();
    drop(cut); // the host's connection breaks mid-call

    // Meanwhile another stream of the same session carries other events.
    let other = s.send(slow_progress(2, 3, 30, "other")).await;
    assert_eq!(progress(&other.related), [1.0, 2.0, 3.0]);

    let mut resumed = s.resume(&last_id).await;
    assert_eq!(resumed.status, 200);
    assert!(resumed.is_sse());
    let msgs = until_response(&mut resumed, 1).await;
    assert_eq!(
        progress(&msgs),
        [3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        "exactly the events after Last-Event-ID: {msgs:?}"
    );
    assert!(
        msgs.iter()
            .filter(|m| m["method"] == "notifications/progress")
            .all(|m| m["params"]["progressToken"] == "mine"),
        "nothing from the other stream: {msgs:?}"
    );
    assert_eq!(
        msgs.last().unwrap()["result"]["content"][0]["text"],
        "progressed 8"
    );
    assert!(
        resumed
            .event_ids
            .iter()
            .all(|id| stream_of(id) == stream_of(&last_id)),
        "ids of the resumed stream: {:?} after {last_id}",
        resumed.event_ids
    );
    assert!(
        resumed.ends_within(Duration::from_secs(2)).await,
        "ends after the response"
    );
}

#[tokio::test]
async fn resumes_that_cannot_be_honoured_are_400_or_410_never_an_empty_200() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for bad in ["abc", "12", "1-x", "-1", " "] {
        let r = s.resume(bad).await;
        assert_eq!(r.status, 400, "malformed {bad:?}");
    }
    for gone in ["999999-1", "424242-0"] {
        let r = s.resume(gone).await;
        assert_eq!(r.status, 410, "unknown stream {gone:?}");
    }
    // A short call's stream, then one longer than the replay buffer: the short
    // call's events, its response among them, are evicted; resuming it is 410.
    let mut short = s.open(&slow_progress(2, 1, 1, "short")).await;
    until_response(&mut short, 2).await;
    let short_stream = stream_of(&short.event_ids[0]).to_owned();
    let mut long = s.open(&slow_progress(3, 300, 1, "long")).await;
    let msgs = until_response(&mut long, 3).await;
    assert_eq!(progress(&msgs).len(), 300);
    let r = s.resume(&format!("{short_stream}-0")).await;
    assert_eq!(r.status, 410, "an evicted response");
    let stream = stream_of(&long.event_ids[0]).to_owned();
    let r = s.resume(&format!("{stream}-100000")).await;
    assert_eq!(r.status, 410, "an id never issued");
    // Only progress notifications were evicted from the long stream: resuming
    // from its start skips them and still ends with the response.
    let mut resumed = s.resume(&format!("{stream}-1")).await;
    assert_eq!(resumed.status, 200);
    let rest = until_response(&mut resumed, 3).await;
    assert!(rest.len() < 300, "the evicted notifications are skipped");
}

#[tokio::test]
async fn another_sessions_event_ids_are_gone_for_this_session() {
    let gw = TestGateway::start(FX).await;
    let (a, b) = (gw.session().await, gw.session().await);
    // Both sessions have had a streamed call.
    let mut sa = a.open(&slow_progress(1, 4, 50, "a")).await;
    let msgs = until_response(&mut sa, 1).await;
    assert_eq!(progress(&msgs).len(), 4);
    let mut sb = b.open(&slow_progress(1, 4, 50, "b")).await;
    until_response(&mut sb, 1).await;
    for id in sa.event_ids.iter().take(3) {
        let r = b.resume(id).await;
        assert_eq!(
            r.status, 410,
            "session b presenting a's event id {id} (b's own ids: {:?})",
            sb.event_ids
        );
    }
    // a itself can still resume its stream.
    let mut again = a.resume(&sa.event_ids[1]).await;
    assert_eq!(again.status, 200);
    assert!(again.next(Duration::from_secs(2)).await.is_some());
}

#[tokio::test]
async fn post_streams_start_with_the_priming_event_on_2025_11_25_only() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let mut st = s.open(&slow_progress(1, 2, 150, "p")).await;
    assert!(st.is_sse());
    until_response(&mut st, 1).await;
    let prime = &st.raw_events[0];
    assert!(!prime.id.is_empty(), "priming event has an id: {prime:?}");
    assert!(prime.data.is_empty(), "and empty data: {prime:?}");
    assert!(prime.retry.is_some(), "and a retry field: {prime:?}");
    assert!(st.raw_events[1..].iter().all(|e| !e.data.is_empty()));

    let mut old = gw.client();
    old.initialize_version("2025-06-18", json!({})).await;
    let mut st = old.open(&slow_progress(1, 2, 150, "p")).await;
    assert!(st.is_sse());
    until_response(&mut st, 1).await;
    assert!(
        st.raw_events.iter().all(|e| !e.data.is_empty()),
        "no priming event for 2025-06-18: {:?}",
        st.raw_events
    );
}

#[tokio::test]
async fn unrelated_messages_wait_for_the_get_stream() {
    let dir = TestDir::new();
    std::fs::write(
        dir.path("tools.json"),
        json!([{"name": "log_later", "inputSchema": {"type": "object"}}]).to_string(),
    )
    .unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [server]
        metrics_listen = "off"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        [backends.mine]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/tools.json"]
        mode = "per_session"
        "#,
    )
    .await;
    let s: McpClient = gw.session().await;
    let r = s.call_tool("fx__add_tool", json!({"name": "late"})).await;
    assert_eq!(r.result()["content"][0]["text"], "added late");
    let r = s
        .call_tool(
            "mine__log_later",
            json!({"delay_ms": 50, "text": "while away"}),
        )
        .await;
    assert_eq!(r.result()["content"][0]["text"], "later");
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Only now does the host open its GET stream.
    let mut listen = s.get_stream().await;
    let mut got = Vec::new();
    while let Some(m) = listen.next(Duration::from_millis(800)).await {
        got.push(m);
    }
    let methods: Vec<&str> = got.iter().filter_map(|m| m["method"].as_str()).collect();
    assert!(
        methods.contains(&"notifications/tools/list_changed"),
        "{got:?}"
    );
    let log = got
        .iter()
        .find(|m| m["method"] == "notifications/message")
        .unwrap_or_else(|| panic!("queued log delivered: {got:?}"));
    assert_eq!(log["params"]["data"], "while away");
    assert_eq!(log["params"]["logger"], "mine/bg");
}

#[tokio::test]
async fn resuming_after_the_end_of_a_finished_stream_is_410_not_an_empty_200() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let mut st = s.open(&slow_progress(1, 3, 60, "done")).await;
    until_response(&mut st, 1).await;
    let last = st.event_ids.last().unwrap().clone();
    // Resuming before the end replays the rest...
    let mut r = s.resume(&st.event_ids[1]).await;
    assert_eq!(r.status, 200);
    assert!(r.next(Duration::from_secs(2)).await.is_some());
    // ...but after the final response there is nothing left to deliver, ever.
    let r = s.resume(&last).await;
    assert_eq!(
        r.status, 410,
        "after {last}, the last event of a finished stream"
    );
}

#[tokio::test]
async fn a_second_get_is_primed_with_an_event_id_of_its_own() {
    // Event ids are unique within a session (2025-11-25 basic/transports): a
    // GET taking the standalone stream over must not repeat the earlier
    // GET's priming id (it did: both were `N-0`).
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let mut first = s.get_stream().await;
    assert_eq!(first.status, 200);
    assert!(first.next(Duration::from_millis(300)).await.is_none());
    let mut second = s.get_stream().await;
    assert_eq!(second.status, 200);
    assert!(second.next(Duration::from_millis(300)).await.is_none());
    let (a, b) = (first.raw_events[0].clone(), second.raw_events[0].clone());
    assert!(a.data.is_empty() && b.data.is_empty(), "{a:?} {b:?}");
    assert!(!a.id.is_empty() && !b.id.is_empty(), "{a:?} {b:?}");
    assert_ne!(a.id, b.id, "the second GET's priming event id is new");
    assert_eq!(
        stream_of(&a.id),
        stream_of(&b.id),
        "the same stream goes on"
    );

    // What comes next carries a later id, and the new priming id resumes.
    let r = s.call_tool("fx__add_tool", json!({"name": "late"})).await;
    assert_eq!(r.result()["content"][0]["text"], "added late");
    let m = second
        .next(Duration::from_secs(2))
        .await
        .expect("list_changed on the GET that took over");
    assert_eq!(m["method"], "notifications/tools/list_changed");
    let seq = |id: &str| id.split_once('-').unwrap().1.parse::<u64>().unwrap();
    let after = second.event_ids.last().unwrap().clone();
    assert!(seq(&after) > seq(&b.id), "{after} after {}", b.id);
    let mut again = s.resume(&b.id).await;
    assert_eq!(again.status, 200);
    let m = again
        .next(Duration::from_secs(2))
        .await
        .expect("replayed after the priming id");
    assert_eq!(m["method"], "notifications/tools/list_changed");
}
