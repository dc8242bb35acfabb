//! Fencing (issue 11): a replica cut off from the shared store for longer than
//! its heartbeat TTL stops acting as the owner of its sessions' per-session
//! stdio children. A proxy in front of the real `redis-server` blackholes
//! replica A's connections; replica B reaches Redis directly. Heartbeat
//! 200 ms, so the TTL is 600 ms.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::proxy::RedisProxy;
use common::served::Served;
use common::store::{TestRedis, at, echo_within, per_session_fx, replica_at, scrape};
use common::{McpClient, TestDir, gone, logged_calls, metric, text_of, wait_for};
use serde_json::json;

/// The pid of the child that ran the `fx__echo` of `text`.
fn pid_of(log: &Path, text: &str) -> u64 {
    logged_calls(log, "echo")
        .iter()
        .find(|e| e["msg"]["params"]["arguments"]["text"] == text)
        .and_then(|e| e["pid"].as_u64())
        .unwrap_or_else(|| panic!("{text} never reached a child"))
}

/// Redis, a proxy in front of it, replica A behind the proxy (and B on
/// Redis directly, when `with_b`), a session on A that started its child.
async fn setup(
    with_b: bool,
) -> (
    TestRedis,
    RedisProxy,
    TestDir,
    PathBuf,
    Served,
    Option<Served>,
    McpClient,
) {
    let redis = TestRedis::start().await;
    let proxy = RedisProxy::start(redis.port).await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica_at(Some(&proxy.url), &per_session_fx(&log)).await;
    let b = match with_b {
        true => Some(replica_at(Some(&redis.url()), &per_session_fx(&log)).await),
        false => None,
    };
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let r = echo_within(&s, "p1").await;
    assert_eq!(text_of(&r), "p1", "{r}");
    (redis, proxy, dir, log, a, b, s)
}

/// Waits (at most 10 s) until `gw` reports the store reachable (`up`) or not.
async fn store_up(gw: &Served, up: bool) {
    let want = if up { 1.0 } else { 0.0 };
    for _ in 0..100 {
        let m = scrape(gw).await;
        if metric(&m, "mcpgate_cluster_redis_up", &[]) == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "store never {}:\n{}",
        if up { "up" } else { "down" },
        gw.log()
    );
}

#[tokio::test]
async fn a_fenced_owner_hands_over_after_the_partition_and_stops_its_child() {
    let (_redis, proxy, _dir, log, a, b, s) = setup(true).await;
    let b = b.unwrap();
    let p1 = pid_of(&log, "p1");
    // A's next heartbeats see B listening (a replica that could adopt).
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut();
    // Longer than A's heartbeat TTL: A's key expires, A fences itself.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        a.logged_message("fenced"),
        "A noticed the partition:\n{}",
        a.log()
    );
    // While cut off, A does not run the session's requests on P1: another
    // replica may have adopted the session.
    let r = echo_within(&s, "while cut").await;
    assert_eq!(r["error"]["code"], -32603, "{r}\nA:\n{}", a.log());
    assert!(
        logged_calls(&log, "echo")
            .iter()
            .all(|e| e["msg"]["params"]["arguments"]["text"] != "while cut"),
        "not run anywhere"
    );
    // B adopts the session (A's heartbeat is gone) and starts P2.
    let r = echo_within(&at(&s, &b), "p2").await;
    assert_eq!(text_of(&r), "p2", "{r}\nB:\n{}", b.log());
    let p2 = pid_of(&log, "p2");
    assert_ne!(p1, p2, "B started a child of its own");
    proxy.heal();
    store_up(&a, true).await;
    // A learns B owns the session now: its child P1 stops.
    assert!(
        wait_for(Duration::from_secs(5), || gone(p1 as u32)).await,
        "P1 stopped after the heal:\n{}",
        a.log()
    );
    // A call landing on A reaches P2, handed to B.
    let r = echo_within(&s, "back on a").await;
    assert_eq!(text_of(&r), "back on a", "{r}\nA:\n{}", a.log());
    assert_eq!(pid_of(&log, "back on a"), p2, "ran on B's child");
}

#[tokio::test]
async fn a_lone_replica_cut_off_from_the_store_keeps_serving_its_session() {
    let (_redis, proxy, _dir, log, a, _b, s) = setup(false).await;
    let p1 = pid_of(&log, "p1");
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    store_up(&a, false).await;
    // No other replica was there to adopt it: served here, on the same child.
    let r = echo_within(&s, "alone").await;
    assert_eq!(text_of(&r), "alone", "{r}\nA:\n{}", a.log());
    assert_eq!(pid_of(&log, "alone"), p1);
    proxy.heal();
    store_up(&a, true).await;
    // Still its own after the heal: the child goes on, owned again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = echo_within(&s, "healed").await;
    assert_eq!(text_of(&r), "healed", "{r}");
    assert_eq!(pid_of(&log, "healed"), p1);
    let m = scrape(&a).await;
    assert_eq!(
        metric(&m, "mcpgate_sessions_owned", &[]),
        Some(1.0),
        "owned again:\n{m}"
    );
}
