//! The owner of a session's per-session stdio child (`[cluster] redis`,
//! `http/owner.rs`) keeps it while other replicas forward its calls, answers
//! them while it ends other sessions, and hands the session over at a drain:
//! a real `redis-server`, two `mcpgate serve` replicas A and B with the same
//! keys, the fake stdio backend in per-session mode logging every message
//! (with its pid) to one file.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::served::Served;
use common::store::{KEYS, TestRedis, at};
use common::{McpClient, TestDir, logged, logged_calls, wait_for};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// `mcpgate serve` sharing `redis` with a 200 ms heartbeat, a 2 s shutdown
/// grace, `idle` as `server.session_idle_timeout` and backend `fx`: the fake
/// stdio backend, one child per session, logging to `log`, with `args` added.
async fn replica(redis: &TestRedis, idle: &str, log: &Path, args: &str) -> Served {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         shutdown_grace = \"2s\"\nsession_idle_timeout = \"{idle}\"\n\
         [cluster]\nredis = \"{}\"\nheartbeat = \"200ms\"\n\
         [backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [{args}\"--log\", \"{}\"]\nmode = \"per_session\"\non_owner_loss = \"end_session\"\n",
        redis.url(),
        log.display()
    );
    Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", KEYS)]).await
}

/// A tool call's response (any outcome).
async fn call(c: &McpClient, tool: &str, args: Value) -> Value {
    c.call_tool(tool, args).await.response
}

/// The text a tool call answered with (`""`: an error, or no text).
fn text_of(response: &Value) -> &str {
    response
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The pids of the children that ran each `tools/call` of `tool`, in order.
fn call_pids(log: &Path, tool: &str) -> Vec<u64> {
    logged_calls(log, tool)
        .iter()
        .filter_map(|e| e.get("pid").and_then(Value::as_u64))
        .collect()
}

/// A session claimed by A (one `echo` there), spoken to through B.
async fn owned_by_a(a: &Served, b: &Served) -> (McpClient, McpClient) {
    owned_by_a_with(a, b, json!({})).await
}

/// [`owned_by_a`] for a host declaring `caps`.
async fn owned_by_a_with(a: &Served, b: &Served, caps: Value) -> (McpClient, McpClient) {
    let mut s = McpClient::new(&a.url);
    s.initialize(caps).await;
    let r = call(&s, "fx__echo", json!({"text": "claim"})).await;
    assert_eq!(text_of(&r), "claim", "{r}");
    let on_b = at(&s, b);
    (s, on_b)
}

#[tokio::test]
async fn forwarded_calls_keep_the_owners_copy_from_idling_out() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica(&redis, "3s", &log, "").await;
    let b = replica(&redis, "3s", &log, "").await;
    let (_s, on_b) = owned_by_a(&a, &b).await;
    // Only B hears from the host, for well over an idle timeout.
    for i in 0..11 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let text = format!("via b {i}");
        let r = call(&on_b, "fx__echo", json!({ "text": text })).await;
        assert_eq!(text_of(&r), text, "{r}\n{}", a.log());
    }
    let pids: BTreeSet<u64> = call_pids(&log, "echo").into_iter().collect();
    assert_eq!(
        pids.len(),
        1,
        "one child, the owner's, all along: {pids:?}\n{}",
        a.log()
    );
    assert!(!a.logged_message("session expired"), "{}", a.log());
}

#[tokio::test]
async fn an_owner_ending_another_session_still_picks_up_forwarded_calls() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    // Children that take ~4 s to stop (stdin closed, SIGTERM, SIGKILL).
    let a = replica(&redis, "10m", &log, "\"--ignore-sigterm\", ").await;
    let b = replica(&redis, "10m", &log, "\"--ignore-sigterm\", ").await;
    let (_s, on_b) = owned_by_a(&a, &b).await;
    // Another session with a child on A, ended through B: A stops that child.
    let (_other, other_on_b) = owned_by_a(&a, &b).await;
    assert_eq!(other_on_b.delete().await.status.as_u16(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..3 {
        let text = format!("while stopping {i}");
        let r = call(&on_b, "fx__echo", json!({ "text": text })).await;
        assert_eq!(text_of(&r), text, "{r}\n{}", a.log());
    }
}

#[tokio::test]
async fn a_draining_owner_hands_its_session_over_under_steady_calls() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let mut a = replica(&redis, "10m", &log, "").await;
    let b = replica(&redis, "10m", &log, "").await;
    let (_s, on_b) = owned_by_a(&a, &b).await;
    let first = call_pids(&log, "echo")[0];
    // Three hosts' worth of overlapping calls through B, for 4 s: A always
    // has one in flight.
    let end = tokio::time::Instant::now() + Duration::from_secs(4);
    let loops: Vec<_> = (0..3)
        .map(|n| {
            let c = on_b.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(70 * n)).await;
                let mut failed = Vec::new();
                while tokio::time::Instant::now() < end {
                    let r = call(&c, "fx__sleep", json!({"s": 0.2})).await;
                    if text_of(&r) != "slept" {
                        failed.push(r);
                    }
                }
                failed
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.signal(Signal::SIGTERM);
    assert_eq!(
        a.exit_code(Duration::from_secs(10)).await,
        Some(0),
        "{}",
        a.log()
    );
    let mut failed = Vec::new();
    for l in loops {
        failed.extend(l.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "calls failed across the drain: {failed:?}\n{}",
        a.log()
    );
    let pids: BTreeSet<u64> = call_pids(&log, "sleep").into_iter().collect();
    assert!(pids.contains(&first), "A ran calls before: {pids:?}");
    assert_eq!(pids.len(), 2, "then B's own child: {pids:?}");
}

#[tokio::test]
async fn a_roots_change_sent_to_b_reaches_the_owners_child() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica(&redis, "10m", &log, "").await;
    let b = replica(&redis, "10m", &log, "").await;
    let (_s, on_b) = owned_by_a_with(&a, &b, json!({"roots": {}})).await;
    let child = call_pids(&log, "echo")[0];
    let r = on_b.notify("notifications/roots/list_changed", None).await;
    assert_eq!(r.status.as_u16(), 202);
    let heard = || {
        logged(&log, "notifications/roots/list_changed")
            .iter()
            .any(|e| e["pid"].as_u64() == Some(child))
    };
    assert!(
        wait_for(Duration::from_secs(3), heard).await,
        "A's child heard the roots change:\n{}",
        a.log()
    );
}
