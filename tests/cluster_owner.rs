//! A session's per-session stdio child has one owner replica (`[cluster]
//! redis`, issue 11 item 4): a real `redis-server`, two `mcpgate serve`
//! replicas with the same keys, the fake stdio backend in per-session mode
//! logging every message it receives (with its pid) to one file. Requests for
//! the child that land on the other replica run on the owner; the owner's
//! requests cost no Redis command; a dead owner's session is adopted (a new
//! child with the session's log level, or the session ends, as the backend
//! says); a drained owner lets go and the next replica claims.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use common::served::Served;
use common::store::{TestRedis, at, replica, scrape};
use common::{McpClient, TestDir, logged, logged_calls, metric, text_of, wait_for};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// The fake stdio backend `fx`, one child per session, logging to `log`.
fn fx(log: &std::path::Path, on_owner_loss: &str) -> String {
    format!(
        "{}on_owner_loss = \"{on_owner_loss}\"\n",
        common::store::per_session_fx(log)
    )
}

/// Redis, the shared log and two replicas A and B.
async fn setup(on_owner_loss: &str) -> (TestRedis, TestDir, PathBuf, Served, Served) {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let a = replica(Some(&redis), &fx(&log, on_owner_loss)).await;
    let b = replica(Some(&redis), &fx(&log, on_owner_loss)).await;
    (redis, dir, log, a, b)
}

async fn echo(c: &McpClient, text: &str) -> Value {
    let r = c.call_tool("fx__echo", json!({ "text": text })).await;
    assert_eq!(text_of(&r.response), text, "{}", r.response);
    r.response
}

/// The pids of the children that ran each `tools/call` of `tool`, in order.
fn call_pids(log: &std::path::Path, tool: &str) -> Vec<u64> {
    logged_calls(log, tool)
        .iter()
        .filter_map(|e| e.get("pid").and_then(Value::as_u64))
        .collect()
}

/// Redis commands requests cost so far (all names together).
#[tokio::test]
async fn calls_through_a_then_b_then_a_run_in_one_child() {
    let (redis, _dir, log, a, b) = setup("respawn").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    echo(&s, "one").await;
    echo(&at(&s, &b), "two").await;
    echo(&s, "three").await;
    // Progress made by A's child reaches the host through B.
    let on_b = at(&s, &b);
    let r = on_b
        .request(
            "tools/call",
            json!({"name": "fx__slow_progress", "arguments": {"n": 3, "interval_ms": 20},
                   "_meta": {"progressToken": "p1"}}),
        )
        .await;
    assert_eq!(text_of(&r.response), "progressed 3", "{}", r.response);
    let progress = r
        .related
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 3, "{:?}", r.related);

    let texts: Vec<String> = logged_calls(&log, "echo")
        .iter()
        .map(|e| {
            e["msg"]["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(texts, ["one", "two", "three"], "each ran once");
    let pids: BTreeSet<u64> = call_pids(&log, "echo").into_iter().collect();
    assert_eq!(pids.len(), 1, "one child: {pids:?}\n{}", b.log());
    assert_eq!(
        call_pids(&log, "slow_progress"),
        vec![*pids.first().unwrap()]
    );
    let m = scrape(&b).await;
    assert_eq!(
        metric(&m, "mcpgate_cluster_forwarded_total", &[("kind", "call")]),
        Some(2.0)
    );
    assert_eq!(
        metric(&scrape(&a).await, "mcpgate_sessions_owned", &[]),
        Some(1.0)
    );

    // The owner's own requests make no Redis command.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = redis.request_commands();
    for i in 0..10 {
        echo(&s, &format!("hot {i}")).await;
    }
    // Named on failure: a one-off 6 under load (stop 25) could not be traced.
    let after = redis.request_commands();
    let made: Vec<(&String, u64)> = after
        .iter()
        .map(|(name, n)| (name, n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(
        made.is_empty(),
        "owner hot path made Redis commands: {made:?}"
    );
}

#[tokio::test]
async fn a_cancel_sent_to_b_stops_the_call_running_on_a() {
    let (_redis, _dir, log, a, b) = setup("respawn").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    echo(&s, "claim").await;
    let on_b = at(&s, &b);
    let call = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 5}}});
    let mut stream = on_b.open(&call).await;
    assert_eq!(stream.status, 200);
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "sleep")
            .is_empty())
        .await,
        "the call reached A's child"
    );
    on_b.notify(
        "notifications/cancelled",
        Some(json!({"requestId": 77, "reason": "test"})),
    )
    .await;
    assert!(
        wait_for(Duration::from_secs(3), || !logged(
            &log,
            "notifications/cancelled"
        )
        .is_empty())
        .await,
        "the child heard the cancel:\n{}",
        a.log()
    );
    assert_eq!(
        stream.next(Duration::from_millis(1500)).await,
        None,
        "no result after a cancel"
    );
}

/// A session on A that set its log level and used its child, then A killed.
async fn owner_killed(
    on_owner_loss: &str,
) -> (TestRedis, TestDir, PathBuf, Served, McpClient, u64) {
    let (redis, dir, log, a, b) = setup(on_owner_loss).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let r = s
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    echo(&s, "before").await;
    let first = call_pids(&log, "echo")[0];
    a.signal(Signal::SIGKILL);
    drop(a);
    let s = at(&s, &b);
    (redis, dir, log, b, s, first)
}

#[tokio::test]
async fn a_dead_owners_session_is_adopted_with_a_new_child_and_its_log_level() {
    let (_redis, _dir, log, b, s, first) = owner_killed("respawn").await;
    echo(&s, "after").await;
    let pids = call_pids(&log, "echo");
    assert_eq!(pids.len(), 2, "each call ran once: {pids:?}");
    assert_ne!(pids[1], first, "a new child");
    let replayed = logged(&log, "logging/setLevel")
        .into_iter()
        .filter(|e| e["pid"].as_u64() == Some(pids[1]))
        .any(|e| e["msg"]["params"]["level"] == "warning");
    assert!(replayed, "the new child got the session's log level");
    let m = scrape(&b).await;
    assert_eq!(
        metric(&m, "mcpgate_cluster_adoptions_total", &[]),
        Some(1.0),
        "{m}"
    );
    echo(&s, "again").await;
    assert_eq!(call_pids(&log, "echo")[2], pids[1], "B owns it now");
}

#[tokio::test]
async fn a_dead_owners_session_ends_when_the_backend_says_end_session() {
    let (_redis, _dir, log, _b, s, _first) = owner_killed("end_session").await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "fx__echo", "arguments": {"text": "after"}}});
    let status = s.post(&[], call.to_string()).await.status.as_u16();
    assert_eq!(
        status, 404,
        "the child's state is gone: the host re-initializes"
    );
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}).to_string();
    assert_eq!(
        s.post(&[], ping).await.status.as_u16(),
        404,
        "ended for good"
    );
    assert_eq!(
        call_pids(&log, "echo").len(),
        1,
        "nothing ran after the loss"
    );
}

#[tokio::test]
async fn a_drained_owner_lets_go_and_the_next_replica_claims() {
    let (redis, _dir, log, a, b) = setup("end_session").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    echo(&s, "on a").await;
    let first = call_pids(&log, "echo")[0];
    a.stop(Signal::SIGTERM).await;
    let records = redis.keys("mcpg:*:rec");
    let fields = redis.cli(&["HGETALL", &records[0]]);
    assert!(!fields.contains("own"), "released: {fields}");
    // A drain is no owner loss: no 404 even with end_session.
    echo(&at(&s, &b), "on b").await;
    let pids = call_pids(&log, "echo");
    assert_eq!(pids.len(), 2);
    assert_ne!(pids[1], first);
    let m = scrape(&b).await;
    assert_eq!(
        metric(&m, "mcpgate_cluster_adoptions_total", &[]),
        None,
        "a claim, not an adoption"
    );
}

#[tokio::test]
async fn a_request_given_up_on_is_never_run_by_a_late_owner() {
    let (redis, _dir, log, a, b) = setup("respawn").await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    echo(&s, "claim").await;
    let first = call_pids(&log, "echo")[0];
    // A stalls (its heartbeat key outlives the stop by up to 600 ms): B
    // hands it the call, A does not pick it up within 1 s, B gives up on it
    // first and, A's heartbeat being gone by then, runs it itself.
    a.signal(Signal::SIGSTOP);
    echo(&at(&s, &b), "late").await;
    let m = scrape(&b).await;
    assert_eq!(
        metric(&m, "mcpgate_cluster_forwarded_total", &[("kind", "call")]),
        Some(1.0),
        "handed to A first: {m}"
    );
    assert_eq!(
        metric(
            &m,
            "mcpgate_cluster_adoptions_total",
            &[("reason", "unreachable")]
        ),
        Some(1.0),
        "{m}"
    );
    let takes: Vec<String> = redis
        .keys("mcpg:*:take:*")
        .iter()
        .map(|k| redis.cli(&["GET", k]))
        .collect();
    assert_eq!(takes, ["gone"], "B's give-up won the take key");

    // A goes on and reads the call from its inbox: its pickup loses, the
    // call is not run a second time.
    a.signal(Signal::SIGCONT);
    assert!(
        wait_for(Duration::from_secs(5), || a.logged_message("came too late")).await,
        "A saw the call and did not run it:\n{}",
        a.log()
    );
    let pids = call_pids(&log, "echo");
    assert_eq!(pids.len(), 2, "claim and late, once each: {pids:?}");
    assert_ne!(pids[1], first, "run by B's own child");
}
