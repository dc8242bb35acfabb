//! The shared session store (`[cluster] redis`) with real processes: a real
//! `redis-server` per test (free loopback port, no persistence), two `mcpgate
//! serve` replicas with the same keys and store, real backends. A session
//! initialized on A is served on B from its record (log level included); a
//! DELETE on A is 404 on B, cached there or not; with Redis down cached sessions
//! go on, uncached ones are served from the sealed id alone (counted) and
//! `initialize` is 503 + `Retry-After`, until Redis is back; a replica stopped
//! with SIGTERM leaves its sessions and the backends' own sessions to the others.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{TestRedis, at, replica, scrape};
use common::{FakeHttp, McpClient, Rpc, metric, text_of};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::time::Instant;

const FX: &str = r#"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
mode = "per_session"
"#;

/// Waits (at most `within`) until `name` on `gw` is `value`.
async fn metric_becomes(gw: &Served, name: &str, value: f64, within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        if metric(&scrape(gw).await, name, &[]) == Some(value) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn session(gw: &Served) -> McpClient {
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    s
}

/// The HTTP status of a `ping` on `c`'s session.
async fn ping(c: &McpClient) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    c.post(&[], body).await.status.as_u16()
}

async fn echo(c: &McpClient, text: &str) -> String {
    let r = c.call_tool("fx__echo", json!({ "text": text })).await;
    text_of(&r.response).to_owned()
}

/// The backend's logs relayed to the host while `fx__log` ran at `level`.
async fn logs_at(c: &McpClient, level: &str) -> usize {
    let r: Rpc = c
        .call_tool("fx__log", json!({"level": level, "text": level}))
        .await;
    assert_eq!(text_of(&r.response), "logged", "{}", r.response);
    r.related
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count()
}

/// Commands about session records Redis has executed so far (heartbeats and
/// pub/sub left out): HGETALL, HSET, EXPIRE, DEL, EXISTS, EVAL, EXEC.
fn session_commands(redis: &TestRedis) -> u64 {
    let wanted = ["hgetall", "hset", "expire", "del", "exists", "eval", "exec"];
    wanted.iter().map(|c| redis.calls(c)).sum()
}

/// Waits (at most 2 s) until `check` holds.
async fn eventually<F: Future<Output = bool>>(mut check: impl FnMut() -> F) -> bool {
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_session_initialized_on_a_is_served_on_b_with_its_log_level() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX).await;
    let b = replica(Some(&redis), FX).await;
    assert_eq!(redis.keys("mcpg:replica:*").len(), 2, "both heartbeat");

    let s = session(&a).await;
    let records = redis.keys("mcpg:*:rec");
    assert_eq!(records.len(), 1, "{records:?}");
    let rec = &records[0];
    assert!(rec.starts_with("mcpg:{") && rec.ends_with("}:rec"), "{rec}");
    assert!(
        !rec.contains(s.session.as_deref().unwrap()),
        "no id in keys"
    );
    let ttl: u64 = redis.cli(&["TTL", rec]).parse().unwrap();
    assert!((590..=600).contains(&ttl), "idle timeout as TTL: {ttl}");
    assert_eq!(redis.cli(&["HGET", rec, "v"]), "2025-11-25");

    let set = s
        .request("logging/setLevel", json!({"level": "error"}))
        .await;
    assert!(set.response.get("result").is_some(), "{}", set.response);
    assert_eq!(redis.cli(&["HGET", rec, "lvl"]), "error");

    // A session held here costs no Redis round trip (one EXPIRE a minute at
    // most) once it owns its per-session child (the first use claims it).
    assert_eq!(echo(&s, "claim").await, "claim");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = session_commands(&redis);
    for i in 0..20 {
        assert_eq!(echo(&s, &format!("n{i}")).await, format!("n{i}"));
    }
    let after = session_commands(&redis);
    assert!(after - before <= 1, "{before} -> {after} session commands");

    // B never saw the session: restored from the record, level included.
    let on_b = at(&s, &b);
    assert_eq!(echo(&on_b, "on b").await, "on b");
    assert_eq!(logs_at(&on_b, "info").await, 0, "below the level set on A");
    assert_eq!(logs_at(&on_b, "error").await, 1);
    let text = scrape(&b).await;
    let restored = [("result", "restored")];
    assert_eq!(
        metric(&text, "mcpgate_session_restores_total", &restored),
        Some(1.0)
    );
    assert_eq!(metric(&text, "mcpgate_cluster_redis_up", &[]), Some(1.0));

    // Now cached on B: a level set on A reaches it by broadcast.
    let set = s
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert!(set.response.get("result").is_some(), "{}", set.response);
    assert!(
        eventually(|| async { logs_at(&on_b, "info").await == 1 }).await,
        "B follows the level set on A"
    );
    assert_eq!(
        metric(
            &scrape(&b).await,
            "mcpgate_session_restores_total",
            &restored
        ),
        Some(1.0),
        "B kept its cached copy"
    );
}

#[tokio::test]
async fn a_session_deleted_on_a_is_404_on_b_cached_there_or_not() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX).await;
    let b = replica(Some(&redis), FX).await;
    let cached = session(&a).await;
    let uncached = session(&a).await;
    assert_eq!(echo(&at(&cached, &b), "cached on b").await, "cached on b");
    assert_eq!(redis.keys("mcpg:*:rec").len(), 2);

    assert_eq!(cached.delete().await.status, 200);
    assert_eq!(uncached.delete().await.status, 200);
    assert!(redis.keys("mcpg:*:rec").is_empty(), "records deleted");
    assert_eq!(
        ping(&at(&uncached, &b)).await,
        404,
        "never revived from its id"
    );
    let ended = [("result", "ended")];
    assert_eq!(
        metric(&scrape(&b).await, "mcpgate_session_restores_total", &ended),
        Some(1.0),
        "refused for its missing record"
    );
    assert!(
        eventually(|| async { ping(&at(&cached, &b)).await == 404 }).await,
        "the copy cached on B is dropped"
    );
    assert_eq!(ping(&cached).await, 404);
}

/// What the store closes: without one, an id DELETEd on A still opens on B
/// until `session_max_lifetime` (the token-only window, stated in the docs).
#[tokio::test]
async fn without_a_store_a_session_deleted_on_a_still_opens_on_b() {
    let a = replica(None, FX).await;
    let b = replica(None, FX).await;
    let s = session(&a).await;
    assert_eq!(s.delete().await.status, 200);
    assert_eq!(ping(&s).await, 404);
    assert_eq!(ping(&at(&s, &b)).await, 200);
}

#[tokio::test]
async fn with_redis_down_cached_sessions_go_on_uncached_fail_open_and_initialize_is_503() {
    let mut redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX).await;
    let b = replica(Some(&redis), FX).await;
    let cached = session(&a).await;
    let uncached = session(&a).await;

    redis.kill();
    for gw in [&a, &b] {
        assert!(
            metric_becomes(gw, "mcpgate_cluster_redis_up", 0.0, Duration::from_secs(3)).await,
            "the heartbeat notices"
        );
    }
    assert_eq!(echo(&cached, "still").await, "still");
    assert_eq!(echo(&at(&uncached, &b), "from its id").await, "from its id");
    let text = scrape(&b).await;
    assert_eq!(
        metric(&text, "mcpgate_cluster_degraded_total", &[]),
        Some(1.0)
    );
    assert!(
        metric(
            &text,
            "mcpgate_cluster_store_errors_total",
            &[("op", "heartbeat")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string();
    let started = Instant::now();
    let refused = McpClient::new(&a.url).post(&[], init.clone()).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );

    // Back, but empty (no persistence): new sessions work again, and the
    // cached ones, whose records are gone, end when the replica revalidates.
    redis.restart().await;
    assert!(
        metric_becomes(&a, "mcpgate_cluster_redis_up", 1.0, Duration::from_secs(5)).await,
        "{}",
        a.log()
    );
    let fresh = session(&a).await;
    assert_eq!(echo(&at(&fresh, &b), "after").await, "after");
    assert!(
        eventually(|| async { ping(&cached).await == 404 }).await,
        "revalidated after the reconnect"
    );
    assert!(
        a.logged_message("cached sessions revalidated"),
        "{}",
        a.log()
    );
}

#[tokio::test]
async fn a_redis_that_stops_answering_costs_at_most_its_deadline() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX).await;
    let cached = session(&a).await;
    // Its per-session child is owned here (the first use claims it).
    assert_eq!(echo(&cached, "claim").await, "claim");
    redis.signal(Signal::SIGSTOP);
    let started = Instant::now();
    assert_eq!(echo(&cached, "no store needed").await, "no store needed");
    assert!(started.elapsed() < Duration::from_millis(500), "hot path");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string();
    let started = Instant::now();
    let refused = McpClient::new(&a.url).post(&[], init).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "within the 500 ms deadline: {:?}",
        started.elapsed()
    );
    assert!(
        metric_becomes(&a, "mcpgate_cluster_redis_up", 0.0, Duration::from_secs(2)).await,
        "down"
    );

    redis.signal(Signal::SIGCONT);
    let back = Instant::now();
    assert!(
        metric_becomes(&a, "mcpgate_cluster_redis_up", 1.0, Duration::from_secs(3)).await,
        "{}",
        a.log()
    );
    let fresh = session(&a).await;
    assert!(
        back.elapsed() < Duration::from_secs(3),
        "{:?}",
        back.elapsed()
    );
    assert_eq!(echo(&cached, "kept").await, "kept", "its record survived");
    assert_eq!(echo(&fresh, "new").await, "new");
}

#[tokio::test]
async fn sigterm_in_cluster_mode_keeps_upstream_sessions_and_the_session_goes_on_b() {
    let redis = TestRedis::start().await;
    let fx = FakeHttp::default_started().await;
    let web = format!("[backends.web]\ntype = \"http\"\nurl = \"{}\"\n", fx.url);
    let a = replica(Some(&redis), &web).await;
    let b = replica(Some(&redis), &web).await;
    let s = session(&a).await;
    let r = s.call_tool("web__echo", json!({"text": "on a"})).await;
    assert_eq!(text_of(&r.response), "on a", "{}", r.response);
    let calls = fx.calls("tools/call");
    assert_eq!(calls.len(), 1);
    let upstream = calls[0].header("mcp-session-id").unwrap().to_owned();

    a.stop(Signal::SIGTERM).await;
    // (The gateway's own catalogue connection ends its backend session.)
    let deleted: Vec<String> = fx
        .log()
        .into_iter()
        .filter(|r| r.http_method == "DELETE")
        .filter_map(|r| r.header("mcp-session-id").map(str::to_owned))
        .collect();
    assert!(
        !deleted.contains(&upstream),
        "the host session's backend session {upstream} stays: {deleted:?}"
    );
    assert_eq!(redis.keys("mcpg:*:rec").len(), 1, "the record stays");

    let on_b = at(&s, &b);
    let r = on_b.call_tool("web__echo", json!({"text": "on b"})).await;
    assert_eq!(text_of(&r.response), "on b", "{}", r.response);
}
