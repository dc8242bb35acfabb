//! The standalone GET stream re-attaches on another replica (issue 11,
//! acceptance 2 and 3), with real processes: a real `redis-server`, two
//! `mcpgate serve` replicas with the same keys and store, and per-session
//! backends whose `log_later` tool sends a log unrelated to any request, which
//! goes on the standalone stream: the fake stdio backend `mine` (one child, on
//! the replica owning the session) or, where each replica must make messages
//! for the session on its own, the fake HTTP backend as two per-session
//! backends `ha` and `hb` (one backend session each, shared by both replicas;
//! it refuses a second GET on a session with 409, and one replica opens the
//! GET stream of each: A listens on `ha`, B on `hb`, so what `ha` sends comes
//! out of A and what `hb` sends comes out of B, whichever replica called).
//! A `GET` + `Last-Event-ID`
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
use common::{FakeHttp, FakeHttpOptions, McpClient, SseStream, TestDir};
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

/// Has the session's backend `backend` send the log `text` on the
/// standalone stream (called through `s`'s replica).
async fn log_later(s: &McpClient, backend: &str, text: &str) {
    let tool = format!("{backend}__log_later");
    let r = s
        .call_tool(&tool, json!({"delay_ms": 20, "text": text}))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "later", "{}", r.response);
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

/// The fake HTTP backend as per-session backends `ha` and `hb` offering
/// `log_later`, reached by replica `name` (its requests say so in [`CLIENT`]).
fn http(fx: &FakeHttp, name: &str) -> String {
    ["ha", "hb"]
        .map(|b| {
            format!(
                "[backends.{b}]\ntype = \"http\"\nurl = \"{}\"\nmode = \"per_session\"\n\
                 headers = {{ \"{CLIENT}\" = \"{name}\" }}\n",
                fx.url
            )
        })
        .concat()
}

/// Where the session's backend runs.
enum Backend {
    /// One stdio child `mine`, on the replica owning the session.
    Stdio,
    /// Backends `ha` and `hb`: one HTTP backend session each, called by both
    /// replicas; A opens the GET stream of `ha` and B that of `hb`, so a log
    /// made by `ha` comes out of A and one made by `hb` out of B.
    Http,
}

/// Calls `backend`'s `echo` through `c`'s replica (opening its connection).
async fn echo(c: &McpClient, backend: &str) {
    let r = c
        .call_tool(&format!("{backend}__echo"), json!({"text": "hi"}))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "hi", "{}", r.response);
}

/// Makes A the GET listener of `ha` and B that of `hb` (each the first to
/// open a connection to it; the other then stands by), and checks it: one
/// GET per backend session, from that replica, no 409.
async fn listeners(fx: &FakeHttp, s: &McpClient, on_b: &McpClient) {
    echo(s, "ha").await;
    echo(on_b, "hb").await;
    echo(on_b, "ha").await;
    echo(s, "hb").await;
    // A standby's retry would come within its first heartbeat tick.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let calls = fx.calls("tools/call");
    let sid = |i: usize| calls[i].header("mcp-session-id").unwrap().to_owned();
    let (ha, hb) = (sid(0), sid(1));
    assert_ne!(ha, hb, "one backend session each");
    let gets = fx.log();
    let gets: Vec<(&str, &str, u16)> = (gets.iter())
        .filter(|r| r.http_method == "GET")
        // The session's backend sessions (each replica's catalogue
        // connections have their own).
        .filter(|r| {
            [&ha, &hb]
                .map(|x| x.as_str())
                .contains(&r.header("mcp-session-id").unwrap_or_default())
        })
        .map(|r| {
            let h = |n| r.header(n).unwrap_or_default();
            (h("mcp-session-id"), h(CLIENT), r.status)
        })
        .collect();
    let want = [(ha.as_str(), "a", 200), (hb.as_str(), "b", 200)];
    let mut got = gets.clone();
    got.sort_unstable();
    let mut want = want.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "A listens on ha, B on hb, no 409: {gets:?}");
}

/// Redis, replicas A and B of the same store with `backend`, and a host
/// session initialized on A (declaring `caps`), also reachable through B
/// (with [`Backend::Http`], A listening on `ha` and B on `hb`).
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
            let opts = FakeHttpOptions {
                single_get: true,
                ..FakeHttpOptions::default()
            };
            let fx = FakeHttp::start(opts).await;
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
    if let Some(fx) = &fx {
        listeners(fx, &s, &on_b).await;
    }
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
    log_later(&s, "mine", "one").await;
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
    log_later(&on_b, "mine", "two").await;
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
    log_later(&s, "ha", "one").await;
    let (_, seen) = next_log(&mut get).await.expect("one");
    drop(get);
    // Sent while the host is away: queued on A, mirrored.
    log_later(&s, "ha", "two").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut ids = vec![seen.clone()];
    let mut on_b_get = on_b.resume(&seen).await;
    assert_eq!(on_b_get.status, 200, "{}", b.log());
    let (text, i) = next_log(&mut on_b_get)
        .await
        .unwrap_or_else(|| panic!("{}", b.log()));
    assert_eq!(text, "two", "replayed from the store");
    ids.push(i);
    log_later(&on_b, "hb", "three").await;
    let (text, i) = next_log(&mut on_b_get).await.expect("B's own log");
    assert_eq!(text, "three");
    ids.push(i);
    drop(on_b_get);

    // A, still alive, still listens on `ha`: what it sends now goes to the
    // stream B continues (numbered there, not on A's old copy of it), so the
    // host gets it when it comes back, here on A, replayed from the store.
    log_later(&s, "ha", "four").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = ids.last().unwrap().clone();
    let mut back_on_a = s.resume(&last).await;
    assert_eq!(back_on_a.status, 200, "{}", a.log());
    let (text, i) = next_log(&mut back_on_a)
        .await
        .unwrap_or_else(|| panic!("{}", a.log()));
    assert_eq!(text, "four", "handed to B's stream, replayed: nothing lost");
    ids.push(i);
    log_later(&s, "ha", "five").await;
    let (text, i) = next_log(&mut back_on_a)
        .await
        .unwrap_or_else(|| panic!("{}", a.log()));
    assert_eq!(text, "five", "then live, once");
    ids.push(i);

    let parsed: Vec<(u64, u64)> = ids.iter().map(|i| id(i)).collect();
    assert!(parsed.iter().all(|p| p.0 == parsed[0].0), "{ids:?}");
    let seqs: Vec<u64> = parsed.iter().map(|p| p.1).collect();
    let first = seqs[0];
    assert_eq!(
        seqs,
        (first..first + 5).collect::<Vec<_>>(),
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
    log_later(&s, "ha", "one").await;
    let (_, seen) = next_log(&mut get).await.expect("one");
    drop(get);

    // Another session's id at B: refused, none of this session's events.
    let mut other = McpClient::new(&b.url);
    other.initialize(json!({})).await;
    let foreign = other.resume(&seen).await;
    assert_eq!(foreign.status, 410);

    // The store loses the events after the host's id: a new stream from now.
    log_later(&s, "ha", "two").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for key in redis.keys("mcpg:*:ev") {
        redis.cli(&["DEL", &key]);
    }
    let mut fresh = on_b.resume(&seen).await;
    assert_eq!(fresh.status, 200, "{}", b.log());
    log_later(&on_b, "hb", "three").await;
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
    log_later(&s, "ha", "one").await;
    let mut seen = vec![next_log(&mut get).await.expect("A's own log")];
    // B's listener (`hb`) gets a log for the session: the host listens on A.
    log_later(&on_b, "hb", "two").await;
    let sent = Instant::now();
    let two = next_log_within(&mut get, Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("not on A's stream within 2 s:\n{}", b.log()));
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    seen.push(two);
    log_later(&s, "ha", "three").await;
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
    log_later(&on_b, "hb", "four").await;
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
