//! stdio supervision, so that a child that crash-loops, floods stderr (10 MB) or
//! stops answering is neither reported healthy nor left hanging requests: a
//! crash-looping child is reported down and its restarts are backed off; a child
//! that stops answering pings is restarted; a flood on stderr blocks nothing.

mod common;

use std::time::Duration;

use common::{TestGateway, gone, logged_pids, metric, read_log, scrape, text_of, wait_for};
use serde_json::{Value, json};
use tokio::time::Instant;

async fn restarts(gw: &TestGateway, backend: &str) -> f64 {
    metric(
        &scrape(gw).await,
        "mcpgate_backend_restarts_total",
        &[("backend", backend)],
    )
    .unwrap_or(0.0)
}

async fn readyz_state(gw: &TestGateway, backend: &str) -> Value {
    let r = reqwest::get(format!("http://{}/readyz", gw.addr))
        .await
        .unwrap();
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    body["backends"][backend]["state"].clone()
}

#[tokio::test]
async fn a_crash_looping_child_is_down_and_backed_off() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.crash]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--crash-on-start"]
        [backends.dies]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--exit-after-calls", "0", "--log", "${TEST_DIR}/dies.log"]
        "#,
    )
    .await;
    let started = Instant::now();
    let s = gw.session().await;
    // Every call kills `dies`; each fails fast with an error naming it.
    for _ in 0..4 {
        let t = Instant::now();
        let r = s.call_tool("dies__echo", json!({"text": "x"})).await;
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let e = &r.response["error"];
        assert!(
            e["data"]["backend"] == "dies"
                || e["message"].as_str().is_some_and(|m| m.contains("dies")),
            "{}",
            r.response
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(started.elapsed())).await;
    let text = scrape(&gw).await;
    assert_eq!(
        metric(&text, "mcpgate_backend_up", &[("backend", "crash")]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(readyz_state(&gw, "crash").await, "down");
    // Backoff 0.5 s doubling (±20 %): about 3 attempts in 3 s, never a tight loop.
    let early = restarts(&gw, "crash").await;
    assert!((1.0..=5.0).contains(&early), "restarts after 3 s: {early}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = restarts(&gw, "crash").await;
    assert!(later - early <= 2.0, "backed off: {early} → {later} in 2 s");
    let dies = restarts(&gw, "dies").await;
    assert!(dies <= 6.0, "dies restarted {dies} times");
    assert!(logged_pids(&gw.dir.path("dies.log")).len() <= 7);
}

#[tokio::test]
async fn a_child_that_stops_answering_pings_is_restarted() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        backend_ping_interval = "200ms"
        [backends.hangs]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--hang-after", "2", "--log", "${TEST_DIR}/hangs.log"]
        timeout = "300ms"
        "#,
    )
    .await;
    let log = gw.dir.path("hangs.log");
    assert!(
        wait_for(Duration::from_secs(6), || logged_pids(&log).len() >= 2).await,
        "a second child was started: {:?}",
        logged_pids(&log)
    );
    let first = read_log(&log)[0]["pid"].as_u64().unwrap() as u32;
    assert!(
        read_log(&log)
            .iter()
            .any(|e| e["pid"] == first && e["event"] == "hung"),
        "the first child hung"
    );
    assert!(
        wait_for(Duration::from_secs(5), || gone(first)).await,
        "the hung child was stopped"
    );
    let mut counted = 0.0;
    for _ in 0..40 {
        counted = restarts(&gw, "hangs").await;
        if counted >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(counted >= 1.0, "restart counted");
}

#[tokio::test]
async fn ten_megabytes_on_stderr_block_nothing() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.loud]
        type = "stdio"
        command = "${FAKE_STDIO}"
        [backends.quiet]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let (s1, s2) = (gw.session().await, gw.session().await);
    let spam = {
        let s1 = s1.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = s1
                .call_tool("loud__spam_stderr", json!({"bytes": 10_000_000}))
                .await;
            (r, t.elapsed())
        })
    };
    // Meanwhile other calls (to both backends) are answered promptly.
    for i in 0..5 {
        let t = Instant::now();
        let r = s2
            .call_tool("quiet__echo", json!({"text": format!("q{i}")}))
            .await;
        assert_eq!(text_of(&r.response), format!("q{i}"));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    let (r, took) = spam.await.unwrap();
    assert_eq!(text_of(&r.response), "spammed");
    assert!(took < Duration::from_secs(8), "{took:?}");
    let t = Instant::now();
    let r = s2.call_tool("loud__echo", json!({"text": "after"})).await;
    assert_eq!(text_of(&r.response), "after");
    assert!(t.elapsed() < Duration::from_secs(1));
}
