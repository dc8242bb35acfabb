//! Resource subscriptions on a shared backend held cluster-wide (`[cluster]
//! redis`, issue 11): the record names the replica holding each, so a
//! subscription outlives that replica (`kill -9`: the replica the host's GET
//! re-attaches to takes it over), a second subscribe on another replica is
//! not made twice (one `resources/updated` per update, not two), and an
//! unsubscribe on another replica ends the holder's. A real `redis-server`,
//! two `mcpgate serve` replicas with the same keys, and one `mcpgate
//! demo-server --http` as backend `demo` in `shared` mode (each replica
//! keeps its own backend session; `bump_counter` notifies every backend
//! session subscribed to `demo://counter` and says how many it notified).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::proxy::RedisProxy;
use common::served::Served;
use common::store::{TestRedis, at, replica, replica_at};
use common::{McpClient, SseStream, text_of, wait_for};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const COUNTER: &str = "demo+demo://counter";

/// `mcpgate demo-server --http` on a free port: the process (killed when
/// dropped) and its endpoint URL.
async fn demo_server() -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["demo-server", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcpgate demo-server --http");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("demo server listening in time")
        .expect("read stdout")
        .expect("endpoint URL on stdout");
    (child, url)
}

/// Redis, the demo server and two replicas reaching it as shared backend
/// `demo`, spoken to in the legacy era (`initialize`, GET stream,
/// `resources/subscribe`).
async fn setup() -> (TestRedis, Child, Served, Served) {
    setup_in("shared", "legacy").await
}

/// [`setup`] with the backend in connection mode `mode` and era `era`
/// (`modern`: stateless, subscriptions through `subscriptions/listen`).
async fn setup_in(mode: &str, era: &str) -> (TestRedis, Child, Served, Served) {
    let redis = TestRedis::start().await;
    let (demo, url) = demo_server().await;
    let backend = format!(
        "[backends.demo]\ntype = \"http\"\nurl = \"{url}\"\nmode = \"{mode}\"\nera = \"{era}\"\n"
    );
    let a = replica(Some(&redis), &backend).await;
    let b = replica(Some(&redis), &backend).await;
    (redis, demo, a, b)
}

/// `resources/subscribe` (or `unsubscribe`) of the counter through `c`.
async fn sub(c: &McpClient, method: &str) {
    let r = c.request(method, json!({ "uri": COUNTER })).await;
    assert_eq!(r.response["result"], json!({}), "{}", r.response);
}

/// Bumps the counter through `c`: how many backend sessions the demo server
/// notified.
async fn bump(c: &McpClient) -> String {
    let r = c.call_tool("demo__bump_counter", json!({})).await;
    let text = text_of(&r.response).to_owned();
    assert!(text.starts_with("Counter is now"), "{}", r.response);
    text
}

/// The `resources/updated` URIs on `stream` until none comes for 1.5 s.
async fn updates(stream: &mut SseStream) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(m) = stream.next(Duration::from_millis(1500)).await {
        if m["method"] == "notifications/resources/updated" {
            got.push(m["params"]["uri"].as_str().unwrap_or_default().to_owned());
        }
    }
    got
}

#[tokio::test]
async fn a_subscription_outlives_the_replica_that_made_it() {
    outlives("shared", "legacy").await;
}

#[tokio::test]
async fn a_modern_backends_subscription_outlives_the_replica_that_made_it() {
    outlives("shared", "modern").await;
}

#[tokio::test]
async fn a_per_session_http_subscription_outlives_the_replica_that_made_it() {
    outlives("per_session", "legacy").await;
}

/// Subscribe through A (backend in `mode` and `era`), kill A, the GET
/// re-attached on B: one update per bump again within a few seconds.
async fn outlives(mode: &str, era: &str) {
    let (redis, _demo, a, b) = setup_in(mode, era).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut on_a = s.get_stream().await;
    sub(&s, "resources/subscribe").await;
    bump(&s).await;
    assert_eq!(updates(&mut on_a).await, [COUNTER], "{}", a.log());

    a.signal(Signal::SIGKILL);
    drop(a);
    // The host re-attaches its GET on B, which takes the subscription over
    // once A's heartbeat key is gone (600 ms): an update reaches the host
    // within a few seconds, once per bump. (The demo server keeps A's
    // backend session: it counts it as notified.)
    let on_b = at(&s, &b);
    let mut stream = on_b.get_stream().await;
    let end = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < end {
        bump(&on_b).await;
        got = updates(&mut stream).await;
    }
    assert_eq!(got, [COUNTER], "{}", b.log());
    bump(&on_b).await;
    assert_eq!(updates(&mut stream).await, [COUNTER], "{}", b.log());
    assert!(b.logged_message("subscription taken over"), "{}", b.log());
    let records = redis.keys("mcpg:*:rec");
    let record = redis.cli(&["HGETALL", &records[0]]);
    assert!(record.contains("ss:demo:demo://counter"), "{record}");
}

#[tokio::test]
async fn a_replica_caching_the_session_takes_over_when_the_holder_dies() {
    let (_redis, _demo, a, b) = setup().await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    // The host's GET is on B from the start; A holds the subscription.
    let on_b = at(&s, &b);
    let mut stream = on_b.get_stream().await;
    sub(&s, "resources/subscribe").await;
    bump(&s).await;
    assert_eq!(updates(&mut stream).await, [COUNTER], "{}", a.log());

    // A dies; the GET stays where it is. B, which heard A took it, sees A's
    // heartbeat key go and takes it over.
    a.signal(Signal::SIGKILL);
    drop(a);
    let end = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < end {
        bump(&on_b).await;
        got = updates(&mut stream).await;
    }
    assert_eq!(got, [COUNTER], "{}", b.log());
    bump(&on_b).await;
    assert_eq!(updates(&mut stream).await, [COUNTER], "{}", b.log());
    let gone = "a replica holding subscriptions of a session here is gone";
    assert!(b.logged_message(gone), "{}", b.log());
}

#[tokio::test]
async fn a_subscription_made_again_elsewhere_notifies_once() {
    let (_redis, _demo, a, b) = setup().await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut stream = s.get_stream().await;
    sub(&s, "resources/subscribe").await;
    sub(&at(&s, &b), "resources/subscribe").await;
    for _ in 0..2 {
        let said = bump(&at(&s, &b)).await;
        assert_eq!(updates(&mut stream).await, [COUNTER], "{}", b.log());
        assert!(said.contains("(1 subscribed"), "one upstream: {said}");
    }
}

#[tokio::test]
async fn an_unsubscribe_elsewhere_ends_the_holders_subscription() {
    let (redis, _demo, a, b) = setup().await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut stream = s.get_stream().await;
    sub(&s, "resources/subscribe").await;
    sub(&at(&s, &b), "resources/unsubscribe").await;
    // A hears of it through the store and unsubscribes its backend session.
    let end = Instant::now() + Duration::from_secs(3);
    let mut said = bump(&s).await;
    while !said.contains("(0 subscribed") && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        said = bump(&s).await;
    }
    assert!(
        said.contains("(0 subscribed"),
        "unsubscribed upstream: {said}"
    );
    assert!(a.logged_message("subscription ended here"), "{}", a.log());
    // What the bumps before it sent aside, nothing more comes.
    updates(&mut stream).await;
    bump(&s).await;
    assert_eq!(updates(&mut stream).await, Vec::<String>::new());
    let records = redis.keys("mcpg:*:rec");
    let record = redis.cli(&["HGETALL", &records[0]]);
    assert!(!record.contains("ss:"), "{record}");
}

#[tokio::test]
async fn a_per_session_http_update_reaches_the_host_from_the_listening_replica() {
    let (redis, _demo, a, b) = setup_in("per_session", "legacy").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut stream = s.get_stream().await;
    // B opens the backend session (and listens on it); A subscribes on it.
    bump(&at(&s, &b)).await;
    sub(&s, "resources/subscribe").await;
    let records = redis.keys("mcpg:*:rec");
    let record = redis.cli(&["HGETALL", &records[0]]);
    assert!(record.contains("gl:demo"), "B listens: {record}");
    // The backend announces on B's GET: B hands it to A's standalone stream.
    let said = bump(&s).await;
    assert!(said.contains("(1 subscribed"), "{said}");
    assert_eq!(updates(&mut stream).await, [COUNTER], "{}", b.log());
}

#[tokio::test]
async fn a_fenced_holder_ends_a_subscription_taken_meanwhile() {
    let redis = TestRedis::start().await;
    let proxy = RedisProxy::start(redis.port).await;
    let (_demo, url) = demo_server().await;
    let backend = format!(
        "[backends.demo]\ntype = \"http\"\nurl = \"{url}\"\nmode = \"shared\"\nera = \"legacy\"\n"
    );
    let a = replica_at(Some(&proxy.url), &backend).await;
    let b = replica_at(Some(&redis.url()), &backend).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    sub(&s, "resources/subscribe").await;
    // A's heartbeats see B listening (a replica that could take over).
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut();
    let fenced = wait_for(Duration::from_secs(5), || a.logged_message("fenced:")).await;
    assert!(fenced, "{}", a.log());
    // The host's GET lands on B, which takes the subscription over.
    let on_b = at(&s, &b);
    let mut stream = on_b.get_stream().await;
    let taken = || b.logged_message("subscription taken over");
    assert!(wait_for(Duration::from_secs(5), taken).await, "{}", b.log());
    // A answers the store again: it ends its own share.
    proxy.heal();
    let end = Instant::now() + Duration::from_secs(5);
    let mut said = bump(&on_b).await;
    while !said.contains("(1 subscribed") && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        said = bump(&on_b).await;
    }
    assert!(said.contains("(1 subscribed"), "B's alone: {said}");
    let ended = "while this one was fenced: ended here";
    assert!(a.logged_message(ended), "{}", a.log());
    updates(&mut stream).await;
    bump(&on_b).await;
    assert_eq!(updates(&mut stream).await, [COUNTER], "{}", b.log());
}
