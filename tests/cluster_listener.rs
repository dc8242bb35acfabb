//! One GET listener per shared backend session (issue 11 item 4): a real
//! `redis-server`, two or three `mcpgate serve` replicas with the same keys,
//! one per-session fake HTTP backend that refuses a second concurrent GET on a
//! session with 409 Conflict (as the TypeScript and Python SDK servers do).
//! Of the replicas calling the one backend session, exactly one opens its GET
//! stream (no 409); what the backend sends there reaches the host's GET
//! stream on whichever replica it is attached. When the listening replica is
//! killed (`kill -9`) or drains (SIGTERM), another listens within seconds.
//! When the host's GET moves from the listening replica to another, what the
//! backend sends next reaches the new GET once, in order (A, not yet knowing,
//! numbers it on its old stream; the store refuses it there, and A hands it on).

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{TestRedis, at, replica, scrape};
use common::{FakeHttp, FakeHttpOptions, McpClient, SseStream, metric, text_of, wait_for};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Redis, the fake backend (one GET per session) and `n` replicas reaching
/// it as per-session backend `web`.
async fn setup(n: usize) -> (TestRedis, FakeHttp, Vec<Served>) {
    let redis = TestRedis::start().await;
    let opts = FakeHttpOptions {
        single_get: true,
        ..FakeHttpOptions::default()
    };
    let fx = FakeHttp::start(opts).await;
    let web = format!(
        "[backends.web]\ntype = \"http\"\nurl = \"{}\"\nmode = \"per_session\"\n",
        fx.url
    );
    let mut replicas = Vec::new();
    for _ in 0..n {
        replicas.push(replica(Some(&redis), &web).await);
    }
    (redis, fx, replicas)
}

/// Calls the backend through `c` (opening `c`'s replica's connection).
async fn echo(c: &McpClient, text: &str) {
    let r = c.call_tool("web__echo", json!({ "text": text })).await;
    assert_eq!(text_of(&r.response), text, "{}", r.response);
}

/// The backend session the host session's calls use.
fn upstream(fx: &FakeHttp) -> String {
    let calls = fx.calls("tools/call");
    let first = calls.first().and_then(|r| r.header("mcp-session-id"));
    first.expect("a call").to_owned()
}

/// Has the backend send log `text` on the GET stream of the host session's
/// backend session; true if it had one.
fn backend_says(fx: &FakeHttp, text: &str) -> bool {
    let log = json!({"level": "info", "logger": "bg", "data": text});
    fx.notify(Some(&upstream(fx)), "notifications/message", log) == 1
}

/// Waits (at most `within`) for log `text` on the host's `stream`.
async fn hears(stream: &mut SseStream, text: &str, within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let Some(m): Option<Value> = stream.next(left).await else {
            return false;
        };
        if m["method"] == "notifications/message" && m["params"]["data"] == text {
            return true;
        }
    }
}

/// The texts of the logs on `stream` until none comes for `quiet`, with
/// their event ids.
async fn logs(stream: &mut SseStream, quiet: Duration) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    while let Some(m) = stream.next(quiet).await {
        if m["method"] == "notifications/message" {
            let id = stream.event_ids.last().cloned().unwrap_or_default();
            texts.push((m["params"]["data"].as_str().unwrap_or("").to_owned(), id));
        }
    }
    texts
}

/// A host session initialized on `first`, calling the backend through every
/// replica of `all` in order.
async fn session_on_all(all: &[Served]) -> McpClient {
    let mut s = McpClient::new(&all[0].url);
    s.initialize(json!({})).await;
    for (i, r) in all.iter().enumerate() {
        echo(&at(&s, r), &format!("via {i}")).await;
    }
    s
}

#[tokio::test]
async fn exactly_one_of_three_replicas_listens_and_the_host_hears_it_anywhere() {
    let (_redis, fx, gws) = setup(3).await;
    let s = session_on_all(&gws).await;
    let sid = upstream(&fx);
    // Give standbys time to try (a refused GET is retried after 1 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fx.gets(&sid), (1, 0), "one GET, no 409");

    // The host listens on C; the backend's message comes out of A's GET.
    let mut get = at(&s, &gws[2]).get_stream().await;
    assert_eq!(get.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(backend_says(&fx, "hello"), "the backend has its GET stream");
    assert!(
        hears(&mut get, "hello", Duration::from_secs(5)).await,
        "A:\n{}\nC:\n{}",
        gws[0].log(),
        gws[2].log()
    );
    assert_eq!(fx.gets(&sid), (1, 0));
}

/// The backend listens again within `within` after its listener went away:
/// a second stream opened, and what it sends reaches `get`.
async fn listens_again(fx: &FakeHttp, get: &mut SseStream, within: Duration, b: &Served) {
    let sid = upstream(fx);
    assert!(
        wait_for(within, || fx.gets(&sid).0 == 2).await,
        "another replica GETs: {:?}\n{}",
        fx.gets(&sid),
        b.log()
    );
    assert!(
        wait_for(Duration::from_secs(2), || backend_says(fx, "again")).await,
        "the backend has a GET stream"
    );
    assert!(
        hears(get, "again", Duration::from_secs(5)).await,
        "B:\n{}",
        b.log()
    );
}

#[tokio::test]
async fn a_killed_listener_is_replaced_within_seconds() {
    let (_redis, fx, mut gws) = setup(2).await;
    let s = session_on_all(&gws).await;
    let sid = upstream(&fx);
    assert_eq!(fx.gets(&sid), (1, 0), "A listens, B stands by");
    let b = gws.pop().unwrap();
    let a = gws.pop().unwrap();
    let mut get = at(&s, &b).get_stream().await;
    assert_eq!(get.status, 200);

    a.signal(Signal::SIGKILL);
    let killed = Instant::now();
    listens_again(&fx, &mut get, Duration::from_secs(5), &b).await;
    assert!(
        killed.elapsed() < Duration::from_secs(8),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(fx.gets(&sid).1, 0, "no 409: {:?}", fx.gets(&sid));
    let m = scrape(&b).await;
    let takeovers = ("reason", "holder_lost");
    let n = metric(&m, "mcpgate_cluster_listener_takeovers_total", &[takeovers]);
    assert_eq!(n, Some(1.0), "{m}");
}

#[tokio::test]
async fn a_draining_listener_hands_over_at_once() {
    let (_redis, fx, mut gws) = setup(2).await;
    let s = session_on_all(&gws).await;
    let sid = upstream(&fx);
    assert_eq!(fx.gets(&sid), (1, 0));
    let b = gws.pop().unwrap();
    let a = gws.pop().unwrap();
    let mut get = at(&s, &b).get_stream().await;
    assert_eq!(get.status, 200);

    let stopped = Instant::now();
    a.stop(Signal::SIGTERM).await;
    listens_again(&fx, &mut get, Duration::from_secs(3), &b).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(6),
        "{:?}",
        stopped.elapsed()
    );
    let m = scrape(&b).await;
    let n = metric(
        &m,
        "mcpgate_cluster_listener_takeovers_total",
        &[("reason", "released")],
    );
    assert_eq!(n, Some(1.0), "{m}");
}

/// The host listens on A (A also listens on the backend session), then moves
/// its GET to B: continuing A's stream (`resume`, B takes it over) or a new
/// one. The backend's next messages come out of A's GET at once: they must
/// reach B's GET, each once, in order.
async fn moved_get_hears_the_next_messages(resume: bool) {
    let (_redis, fx, gws) = setup(2).await;
    let s = session_on_all(&gws).await;
    let (a, b) = (&gws[0], &gws[1]);
    assert_eq!(fx.gets(&upstream(&fx)), (1, 0), "A listens");
    let mut get = at(&s, a).get_stream().await;
    assert_eq!(get.status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(backend_says(&fx, "one"));
    let seen = logs(&mut get, Duration::from_secs(2)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    drop(get);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let on_b = at(&s, b);
    let mut get_b = if resume {
        on_b.resume(&seen[0].1).await
    } else {
        on_b.get_stream().await
    };
    assert_eq!(get_b.status, 200, "{}", b.log());
    assert!(backend_says(&fx, "two"));
    assert!(backend_says(&fx, "three"));
    let heard = logs(&mut get_b, Duration::from_secs(2)).await;
    let texts: Vec<&str> = heard.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        texts,
        ["two", "three"],
        "each once, in order\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    if resume {
        let ids: Vec<&str> = [&seen[0], &heard[0], &heard[1]]
            .map(|(_, i)| i.as_str())
            .to_vec();
        let seq = |i: &str| {
            i.split_once('-')
                .map(|(s, q)| (s.to_owned(), q.parse::<u64>().unwrap()))
        };
        let (first, q0) = seq(ids[0]).unwrap();
        let want: Vec<_> = (1..=2).map(|k| Some((first.clone(), q0 + k))).collect();
        assert_eq!(
            ids[1..].iter().map(|i| seq(i)).collect::<Vec<_>>(),
            want,
            "{ids:?}"
        );
    }
    // And later ones too, once.
    assert!(backend_says(&fx, "four"));
    let heard = logs(&mut get_b, Duration::from_secs(2)).await;
    let texts: Vec<&str> = heard.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["four"]);
}

#[tokio::test]
async fn the_next_message_reaches_a_get_that_continued_the_stream_on_another_replica() {
    moved_get_hears_the_next_messages(true).await;
}

#[tokio::test]
async fn the_next_message_reaches_a_new_get_on_another_replica() {
    moved_get_hears_the_next_messages(false).await;
}
