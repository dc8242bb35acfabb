//! Limits, so that load, a flood of requests or many idle sessions (and the
//! per-session children they spawn) cannot grow without bound: a busy backend
//! refuses with "busy" after its queue timeout, the rate limit answers 429 with
//! `Retry-After`, a session's third SSE stream is 429, and idle sessions expire
//! with their children — each rejection counted in `mcpgate_rejections_total`.

mod common;

use std::time::Duration;

use common::{TestGateway, gone, logged_pids, metric, scrape, text_of, wait_for};
use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

async fn rejections(gw: &TestGateway, reason: &str) -> f64 {
    metric(
        &scrape(gw).await,
        "mcpgate_rejections_total",
        &[("reason", reason)],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn a_full_backend_answers_busy_after_its_queue_timeout() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.one]
        type = "stdio"
        command = "${FAKE_STDIO}"
        max_concurrency = 1
        queue_timeout = "200ms"
        "#,
    )
    .await;
    let s = gw.session().await;
    let slow = {
        let s = s.clone();
        tokio::spawn(async move { s.call_tool("one__sleep", json!({"s": 1.5})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let r = s.call_tool("one__echo", json!({"text": "x"})).await;
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(180) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    let e = &r.response["error"];
    assert!(
        e["message"].as_str().unwrap_or_default().contains("busy"),
        "{e}"
    );
    assert_eq!(e["data"]["backend"], "one", "{e}");
    assert_eq!(rejections(&gw, "backend_busy").await, 1.0);
    let text = scrape(&gw).await;
    assert_eq!(
        metric(
            &text,
            "mcpgate_upstream_errors_total",
            &[("backend", "one")]
        ),
        None,
        "a busy refusal is not a backend failure: {text}"
    );
    assert_eq!(text_of(&slow.await.unwrap().response), "slept");
    let r = s.call_tool("one__echo", json!({"text": "free"})).await;
    assert_eq!(text_of(&r.response), "free");
    assert_eq!(rejections(&gw, "backend_busy").await, 1.0);
}

#[tokio::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [server.rate_limit]
        per_second = 5
        burst = 5
        "#,
    )
    .await;
    let s = gw.session().await; // initialize + initialized: two of the five
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let mut limited = 0;
    for _ in 0..10 {
        let r = s.post(&[], ping.clone()).await;
        match r.status.as_u16() {
            200 => {}
            429 => {
                limited += 1;
                let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!((1..=2).contains(&after), "Retry-After {after}");
            }
            other => panic!("status {other}"),
        }
    }
    assert!(limited >= 5, "{limited} of 10 limited");
    assert_eq!(rejections(&gw, "rate_limited").await, f64::from(limited));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.post(&[], ping).await.status, 200, "the bucket refills");
}

const TWO_STREAMS: &str = r#"
[server]
metrics_listen = "127.0.0.1:0"
max_streams_per_session = 2
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
"#;

#[tokio::test]
async fn a_session_may_hold_only_max_streams_per_session_streams() {
    let gw = TestGateway::start(TWO_STREAMS).await;
    let s = gw.session().await;
    let listen = s.get_stream().await;
    assert_eq!(listen.status, 200);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 1.0}}});
    let slow = s.open(&call).await;
    assert!(slow.is_sse(), "a slow call streams");
    let third = s.get_stream().await;
    assert_eq!(third.status, 429, "third GET stream");
    assert_eq!(third.header_str("retry-after"), Some("1"), "RFC 6585 §4");
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let refused = s.post(&[], ping.clone()).await;
    assert_eq!(refused.status, 429, "third POST");
    assert_eq!(refused.header("retry-after"), Some("1"), "RFC 6585 §4");
    assert_eq!(rejections(&gw, "too_many_streams").await, 2.0);
    // Another session is not affected.
    let other = gw.session().await;
    assert_eq!(other.post(&[], ping.clone()).await.status, 200);
    drop(slow);
    drop(listen);
    let mut ok = false;
    for _ in 0..20 {
        if s.post(&[], ping.clone()).await.status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "closed streams free their slots");
}

/// Four concurrent slow calls on a session limited to two streams must not all
/// get 200 (as they did when each was checked before any had opened its stream).
#[tokio::test]
async fn concurrent_requests_cannot_all_pass_the_stream_limit() {
    let gw = TestGateway::start(TWO_STREAMS).await;
    let s = gw.session().await;
    let calls = (0..4).map(|i| {
        let body = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                          "params": {"name": "fx__sleep", "arguments": {"s": 1.0}}})
        .to_string();
        let s = &s;
        async move { s.post(&[], body).await.status }
    });
    let mut statuses = futures_util::future::join_all(calls).await;
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test]
async fn a_thousand_idle_sessions_expire_with_their_children() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        session_idle_timeout = "300ms"
        [backends.per]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/per.log"]
        mode = "per_session"
        "#,
    )
    .await;
    let log = gw.dir.path("per.log");
    let catalogue_pid = {
        assert!(wait_for(Duration::from_secs(3), || !logged_pids(&log).is_empty()).await);
        *logged_pids(&log).iter().next().unwrap()
    };
    // Twenty sessions start a per-session child each...
    for _ in 0..20 {
        let s = gw.session().await;
        let r = s.call_tool("per__echo", json!({"text": "x"})).await;
        assert_eq!(text_of(&r.response), "x");
    }
    // ...and 980 more only initialize, then everyone goes idle.
    let started = Instant::now();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "idle", "version": "0"}}})
    .to_string();
    let base = gw.client(); // one HTTP client (pool) for all
    let created: Vec<bool> = futures_util::stream::iter(0..980)
        .map(|_| {
            let c = base.clone();
            let init = init.clone();
            async move {
                let r = c.post(&[], init).await;
                r.status == 200 && r.header("mcp-session-id").is_some()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert_eq!(created.iter().filter(|ok| **ok).count(), 980);
    let children: Vec<u32> = logged_pids(&log)
        .into_iter()
        .filter(|p| *p != catalogue_pid)
        .collect();
    assert_eq!(
        children.len(),
        20,
        "one child per session that used the backend"
    );
    assert!(
        wait_for(Duration::from_secs(5), || gw.gateway().session_count() == 0).await,
        "{} sessions left after {:?}",
        gw.gateway().session_count(),
        started.elapsed()
    );
    let text = scrape(&gw).await;
    assert_eq!(
        metric(&text, "mcpgate_sessions_active", &[]),
        Some(0.0),
        "{text}"
    );
    for pid in children {
        assert!(
            wait_for(Duration::from_secs(3), || gone(pid)).await,
            "per-session child {pid} outlived its session"
        );
    }
    assert!(!gone(catalogue_pid), "the catalogue connection stays");
}
