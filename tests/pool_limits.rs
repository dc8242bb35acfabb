//! One client cannot take a per_session backend's whole `max_connections`
//! budget (a newcomer's finding: one client filled it in seconds, then every
//! other host was refused for up to 30 minutes):
//!
//! - a cold burst of stateless 2026-07-28 calls waits for the pooled
//!   connections that are starting, at most `pool_max_starting` of a key at once,
//!   and within its client's share, instead of one child per request;
//! - a client over `max_connections_per_client` (here: an address on an open
//!   endpoint, behind a trusted proxy) is refused "busy" and counted, while
//!   another client still gets its connection;
//! - idle pooled connections close after `pool_idle_timeout`.

mod common;

use std::time::Duration;

use common::modern_host::{answer, modern};
use common::{TestGateway, gone, logged_pids, metric, scrape, text_of, wait_for};
use serde_json::{Value, json};

/// `n` concurrent stateless `tools/call`s of `ps__echo`; their answers.
async fn burst(gw: &TestGateway, n: usize) -> Vec<Value> {
    let c = gw.client();
    let calls = (0..n).map(|i| {
        let c = c.clone();
        async move {
            let (body, h) = modern(
                json!(i),
                "tools/call",
                json!({"name": "ps__echo", "arguments": {"text": format!("t{i}")}}),
            );
            answer(&c, &body, &h).await
        }
    });
    futures_util::future::join_all(calls).await
}

fn assert_all_answered(answers: &[Value]) {
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(text_of(a), format!("t{i}"), "call {i}: {a}");
    }
}

#[tokio::test]
async fn a_cold_burst_to_a_legacy_stdio_backend_spawns_at_most_the_clients_share() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections_per_client = 4
        queue_timeout = "60s"
        "#,
    )
    .await;
    let answers = burst(&gw, 100).await;
    assert_all_answered(&answers);
    let pids = logged_pids(&gw.dir.path("ps.log"));
    assert!(
        pids.len() <= 1 + 4,
        "the catalogue's child and at most 4 pooled ones (one call each at a time): {} children",
        pids.len()
    );
}

#[tokio::test]
async fn a_cold_burst_to_a_modern_stdio_backend_waits_for_the_starting_children() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--modern", "--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        queue_timeout = "60s"
        "#,
    )
    .await;
    let answers = burst(&gw, 100).await;
    assert_all_answered(&answers);
    let pids = logged_pids(&gw.dir.path("ps.log"));
    // Its era is known from the catalogue's child: one connection serves every
    // call, so the key starts one (not `pool_max_starting`).
    assert_eq!(
        pids.len(),
        1 + 1,
        "the catalogue's child and one pooled one: {pids:?}"
    );
}

#[tokio::test]
async fn one_client_over_its_share_is_refused_while_another_still_connects() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        trusted_proxies = ["127.0.0.1/32"]
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 8
        max_connections_per_client = 2
        "#,
    )
    .await;
    let greedy = "203.0.113.7";
    let mut own = Vec::new();
    for _ in 0..3 {
        own.push(gw.session_from(greedy).await);
    }
    for s in &own[..2] {
        let r = s.call_tool("ps__echo", json!({"text": "ok"})).await;
        assert_eq!(text_of(&r.response), "ok", "{}", r.response);
    }
    let r = own[2].call_tool("ps__echo", json!({"text": "third"})).await;
    let msg = r.response["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(r.response["error"]["code"], -32603, "{}", r.response);
    assert!(
        msg.contains("busy") && msg.contains("max_connections_per_client"),
        "{}",
        r.response
    );
    // Another client is not refused: the budget is not the first one's.
    let other = gw.session_from("198.51.100.9").await;
    let r = other.call_tool("ps__echo", json!({"text": "mine"})).await;
    assert_eq!(text_of(&r.response), "mine", "{}", r.response);
    let text = scrape(&gw).await;
    let refused = [("backend", "ps"), ("reason", "per_client")];
    assert_eq!(
        metric(&text, "mcpgate_backend_connection_refusals_total", &refused),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "mcpgate_rejections_total",
            &[("reason", "backend_busy")]
        ),
        Some(1.0)
    );
    // One of its sessions ends: its share frees up.
    own[0].delete().await;
    let mut answered = false;
    for _ in 0..50 {
        let r = own[2].call_tool("ps__echo", json!({"text": "third"})).await;
        if r.response.get("result").is_some() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        answered,
        "a connection of the client closed: it may open another"
    );
}

#[tokio::test]
async fn idle_pooled_connections_close_after_the_pool_idle_timeout() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        pool_idle_timeout = "1s"
        "#,
    )
    .await;
    let answers = burst(&gw, 1).await;
    assert_all_answered(&answers);
    let log = gw.dir.path("ps.log");
    let called = common::logged(&log, "tools/call");
    let pooled = called[0]["pid"].as_u64().unwrap() as u32;
    assert!(
        wait_for(Duration::from_secs(5), || gone(pooled)).await,
        "the pooled child is stopped once idle for 1 s"
    );
    // The next call opens another.
    let answers = burst(&gw, 1).await;
    assert_all_answered(&answers);
    assert_eq!(
        logged_pids(&log).len(),
        3,
        "catalogue, first and second pooled"
    );
}

/// A session's first calls to a backend, sent together, all wait for the one
/// connection the first of them opens: the others' reservations must not count
/// against the client's share (they open nothing).
#[tokio::test]
async fn a_sessions_concurrent_first_calls_are_not_refused_at_a_share_of_one() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--start-delay-ms", "300", "--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections_per_client = 1
        "#,
    )
    .await;
    let s = gw.session().await;
    let calls = (0..4).map(|i| {
        let s = &s;
        async move {
            let r = s
                .call_tool("ps__echo", json!({"text": format!("t{i}")}))
                .await;
            r.response
        }
    });
    let answers = futures_util::future::join_all(calls).await;
    assert_all_answered(&answers);
    assert_eq!(
        logged_pids(&gw.dir.path("ps.log")).len(),
        2,
        "the catalogue's child and the session's"
    );
}

/// A reload that removes a per_session backend stops its pooled children with
/// its other connections (not `pool_idle_timeout` later): calls in flight on
/// it fail, and a removed backend holds no process.
#[tokio::test]
async fn removing_the_backend_at_a_reload_stops_its_pooled_children() {
    let keep = r#"
        [server]
        metrics_listen = "off"
        [backends.keep]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#;
    let both = format!(
        "{keep}\n[backends.ps]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--log\", \"${{TEST_DIR}}/ps.log\"]\nmode = \"per_session\"\n"
    );
    let gw = TestGateway::start(&both).await;
    assert_all_answered(&burst(&gw, 1).await);
    let called = common::logged(&gw.dir.path("ps.log"), "tools/call");
    let pooled = called[0]["pid"].as_u64().unwrap() as u32;
    let report = gw
        .gateway()
        .reload(&common::parse_config(keep, &gw.dir.0))
        .await;
    assert_eq!(report.removed, ["ps"]);
    assert!(
        wait_for(Duration::from_secs(5), || gone(pooled)).await,
        "the removed backend's pooled child is stopped"
    );
}

/// A stateless call from `addr` (behind the trusted loopback proxy): its answer.
async fn stateless_from(gw: &TestGateway, addr: &str, text: &str) -> Value {
    let (body, mut h) = modern(
        json!(1),
        "tools/call",
        json!({"name": "ps__echo", "arguments": {"text": text}}),
    );
    h.push(("x-forwarded-for".to_owned(), addr.to_owned()));
    answer(&gw.client(), &body, &h).await
}

/// On an open endpoint a pooled connection is charged to the client address
/// that started it, so it serves that address alone: another client using it
/// would keep it from going idle and the first client charged for it forever.
#[tokio::test]
async fn a_pooled_connection_is_charged_to_and_used_by_its_own_client() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        trusted_proxies = ["127.0.0.1/32"]
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ps.log"]
        mode = "per_session"
        max_connections = 8
        max_connections_per_client = 1
        pool_idle_timeout = "1s"
        "#,
    )
    .await;
    let (first, other) = ("203.0.113.7", "198.51.100.9");
    let a = stateless_from(&gw, first, "first").await;
    assert_eq!(text_of(&a), "first", "{a}");
    // The other client calls on for longer than pool_idle_timeout.
    let until = tokio::time::Instant::now() + Duration::from_millis(2500);
    while tokio::time::Instant::now() < until {
        let a = stateless_from(&gw, other, "other").await;
        assert_eq!(text_of(&a), "other", "{a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The first client has used nothing since: its connection closed idle,
    // and its share is free for a session of its own.
    let s = gw.session_from(first).await;
    let r = s.call_tool("ps__echo", json!({"text": "mine"})).await;
    assert_eq!(text_of(&r.response), "mine", "{}", r.response);
}
