//! The standalone GET stream re-attaches on another replica (issue 11,
//! acceptance 2 and 3), with real processes: a real `redis-server`, two
//! `mcpgate serve` replicas with the same keys and store, and a per-session
//! backend whose `log_later` tool sends a log unrelated to any request, which
//! goes on the standalone stream: the fake stdio backend (one child, on the
//! replica owning the session) or, where each replica must make messages for
//! the session on its own, the fake HTTP backend (one backend session, each
//! replica with its own GET stream on it; the log goes to the GET stream of
//! the replica that called). A `GET` + `Last-Event-ID`
//! of a stream that A produced is answered on B with what the store holds
//! after that id and then B's own notifications on the same stream, with ids
//! that keep increasing (no gap, no repeat); after A is killed within 2 s; A,
//! still alive, stops numbering a stream B took over; an id whose events the
//! store lost gets a new stream from now (200, not 410); another session's id
//! is 410. What B's backend sends for the session while the host listens on A
//! reaches A's stream once, numbered there (phase 4), a request too, whose
//! answer POSTed to A reaches B's backend; with the host's `GET` on B it stays
//! on B.

mod common;

use std::time::Duration;

use common::fake_http::CLIENT;
use common::store::{TestRedis, at, replica, scrape};
use common::{FakeHttp, McpClient, SseStream, TestDir};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

/// A per-session fake stdio backend `mine` offering `log_later` and
/// `ask_later`: its one child runs on the replica that owns the session.
fn stdio(dir: &TestDir) -> String {
    let tools = dir.path("tools.json");
    let defs = json!([
        {"name": "log_later", "inputSchema": {"type": "object"}},
        {"name": "ask_later", "inputSchema": {"type": "object"}}
    ]);
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
    next_log_within(stream, Duration::from_secs(5)).await
}

/// [`next_log`], if one comes within `within`.
async fn next_log_within(stream: &mut SseStream, within: Duration) -> Option<(String, String)> {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let m: Value = stream.next(left).await?;
        if m["method"] == "notifications/message" {
            let id = stream.event_ids.last().cloned().unwrap_or_default();
            return Some((m["params"]["data"].as_str()?.to_owned(), id));
        }
    }
}

/// The fake HTTP backend as per-session backend `mine` offering `log_later`,
/// reached by replica `name` (its requests say so in [`CLIENT`]).
fn http(fx: &FakeHttp, name: &str) -> String {
    format!(
        "[backends.mine]\ntype = \"http\"\nurl = \"{}\"\nmode = \"per_session\"\n\
         headers = {{ \"{CLIENT}\" = \"{name}\" }}\n",
        fx.url
    )
}

/// Where the session's backend runs.
enum Backend {
    /// One stdio child, on the replica owning the session.
    Stdio,
    /// One HTTP backend session; each replica calls it and has its own GET
    /// stream on it, so a log made on B comes out of B.
    Http,
}

/// Redis, replicas A and B of the same store with `backend`, and a host
/// session initialized on A (declaring `caps`), also reachable through B.
struct Pair {
    redis: TestRedis,
    dir: TestDir,
    fx: Option<FakeHttp>,
    a: common::served::Served,
    b: common::served::Served,
    s: McpClient,
    on_b: McpClient,
}

async fn pair(caps: Value, backend: Backend) -> Pair {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let (fx, config_a, config_b) = match backend {
        Backend::Stdio => (None, stdio(&dir), stdio(&dir)),
        Backend::Http => {
            let fx = FakeHttp::default_started().await;
            fx.add_tool(json!({"name": "log_later", "inputSchema": {"type": "object"}}));
            let configs = (http(&fx, "a"), http(&fx, "b"));
            (Some(fx), configs.0, configs.1)
        }
    };
    let a = replica(Some(&redis), &config_a).await;
    let b = replica(Some(&redis), &config_b).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(caps).await;
    let on_b = at(&s, &b);
    Pair {
        redis,
        dir,
        fx,
        a,
        b,
        s,
        on_b,
    }
}

/// `{stream}-{seq}` as numbers.
fn id(event_id: &str) -> (u64, u64) {
    let (a, b) = event_id.split_once('-').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[tokio::test]
async fn a_get_stream_re_attaches_on_b_within_2_s_after_a_is_killed() {
    let Pair {
        redis: _redis,
        dir: _dir,
        fx: _fx,
        a,
        b,
        s,
        on_b,
    } = pair(json!({}), Backend::Stdio).await;

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
    let Pair {
        redis: _redis,
        dir: _dir,
        fx: _fx,
        a,
        b,
        s,
        on_b,
    } = pair(json!({}), Backend::Http).await;

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
    let Pair {
        redis,
        dir: _dir,
        fx: _fx,
        a: _a,
        b,
        s,
        on_b,
    } = pair(json!({}), Backend::Http).await;

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

#[tokio::test]
async fn a_log_made_on_b_reaches_the_get_stream_on_a_once() {
    let Pair {
        redis: _redis,
        dir: _dir,
        fx: _fx,
        a: _a,
        b,
        s,
        on_b,
    } = pair(json!({}), Backend::Http).await;

    let mut get = s.get_stream().await;
    assert_eq!(get.status, 200);
    log_later(&s, "one").await;
    let mut seen = vec![next_log(&mut get).await.expect("A's own log")];
    // B's per-session backend logs for the session: the host listens on A.
    log_later(&on_b, "two").await;
    let sent = Instant::now();
    let two = next_log_within(&mut get, Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("not on A's stream within 2 s:\n{}", b.log()));
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    seen.push(two);
    log_later(&s, "three").await;
    seen.push(next_log(&mut get).await.expect("A's own log after it"));
    while let Some(more) = next_log_within(&mut get, Duration::from_millis(500)).await {
        seen.push(more);
    }
    let texts: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["one", "two", "three"], "each once, in order");
    let ids: Vec<(u64, u64)> = seen.iter().map(|(_, i)| id(i)).collect();
    assert!(ids.iter().all(|i| i.0 == ids[0].0), "one stream: {ids:?}");
    assert!(
        ids.windows(2).all(|w| w[0].1 < w[1].1),
        "increasing: {ids:?}"
    );
    let forwarded = "mcpgate_cluster_forwarded_total{kind=\"standalone\"} 1";
    assert!(scrape(&b).await.contains(forwarded), "{}", scrape(&b).await);

    // With the host's GET on B, what B's backend sends stays on B (and B
    // kept no copy of what it forwarded); A's stream gets nothing of it.
    let mut get_b = on_b.get_stream().await;
    assert_eq!(get_b.status, 200, "{}", b.log());
    log_later(&on_b, "four").await;
    let (text, _) = next_log(&mut get_b)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert_eq!(text, "four", "nothing forwarded was also queued on B");
    let stray = next_log_within(&mut get, Duration::from_millis(500)).await;
    assert_eq!(stray, None, "B's own listener's message stays on B");
    assert!(scrape(&b).await.contains(forwarded), "not forwarded again");
}

#[tokio::test]
async fn a_request_made_on_b_reaches_a_and_its_answer_goes_back_to_b() {
    let Pair {
        redis: _redis,
        dir: _dir,
        fx: _fx,
        a,
        b,
        s,
        on_b,
    } = pair(json!({"roots": {}}), Backend::Stdio).await;

    let mut get = s.get_stream().await;
    assert_eq!(get.status, 200);
    // The session's first use of its child: B claims it, the child runs on B.
    let r = on_b
        .call_tool("mine__ask_later", json!({"delay_ms": 20}))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "later");
    let ask = loop {
        let m: Value = get
            .next(Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("no request on A's stream:\n{}", b.log()));
        if m["method"] == "roots/list" {
            break m;
        }
    };
    // Answered at A: the id names B, which relayed the request.
    let roots = json!({"roots": [{"uri": "file:///w", "name": "w"}]});
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": roots});
    assert_eq!(s.post(&[], answer.to_string()).await.status, 202);
    let (text, _) = next_log(&mut get)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert!(
        text.starts_with("roots: ") && text.contains("file:///w"),
        "{text}"
    );
    let on = |kind: &str, n: u32| format!("mcpgate_cluster_forwarded_total{{kind=\"{kind}\"}} {n}");
    let metrics_b = scrape(&b).await;
    assert!(metrics_b.contains(&on("standalone", 2)), "{metrics_b}");
    let metrics_a = scrape(&a).await;
    assert!(metrics_a.contains(&on("answer", 1)), "{metrics_a}");
}
