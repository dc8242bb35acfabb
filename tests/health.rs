//! Health and readiness: `/healthz` is always 200; `/readyz` is 200 with
//! per-backend JSON once every `required = true` backend is up, 503 while one is
//! down (a child that crashes on start), and 200 again once it recovers.

mod common;

use std::time::Duration;

use common::TestGateway;
use serde_json::Value;

async fn probe(gw: &TestGateway, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("http://{}{path}", gw.addr))
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn readyz(gw: &TestGateway) -> (u16, Value) {
    let (status, body) = probe(gw, "/readyz").await;
    (
        status,
        serde_json::from_str(&body).expect("readyz answers JSON"),
    )
}

#[tokio::test]
async fn readyz_follows_required_backends_and_healthz_never_does() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.needed]
        type = "stdio"
        command = "/bin/sh"
        args = ["-c", "test -f ${TEST_DIR}/ok || { echo not yet >&2; exit 1; }; exec ${FAKE_STDIO}"]
        required = true
        [backends.optional]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--crash-on-start"]
        [backends.fine]
        type = "stdio"
        command = "${FAKE_STDIO}"
        mode = "per_session"
        "#,
    )
    .await;
    assert_eq!(probe(&gw, "/healthz").await.0, 200);
    let mut last = Value::Null;
    for _ in 0..50 {
        let (status, body) = readyz(&gw).await;
        last = body;
        let loaded = last["backends"]["fine"]["tools"].as_u64() > Some(0);
        if status == 503 && loaded && last["backends"]["needed"]["state"] == "down" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last["status"], "not_ready", "{last}");
    let needed = &last["backends"]["needed"];
    assert_eq!(
        (needed["state"].as_str(), needed["required"].as_bool()),
        (Some("down"), Some(true)),
        "{last}"
    );
    assert_eq!(last["backends"]["optional"]["state"], "down", "{last}");
    assert_eq!(last["backends"]["optional"]["required"], false, "{last}");
    assert_eq!(last["backends"]["fine"]["state"], "up", "{last}");
    assert_eq!(last["backends"]["fine"]["mode"], "per_session", "{last}");
    assert!(
        last["backends"]["fine"]["tools"].as_u64().unwrap() > 0,
        "{last}"
    );
    assert_eq!(
        probe(&gw, "/healthz").await.0,
        200,
        "liveness ignores backends"
    );

    // The required backend recovers: ready again, without a restart of the gateway.
    std::fs::write(gw.dir.path("ok"), "").unwrap();
    let mut ready = None;
    for _ in 0..80 {
        let (status, body) = readyz(&gw).await;
        if status == 200 {
            ready = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = ready.expect("ready within 8 s of the backend recovering");
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["backends"]["needed"]["state"], "up", "{body}");
    assert_eq!(
        body["backends"]["optional"]["state"], "down",
        "optional stays down: {body}"
    );
    assert_eq!(probe(&gw, "/healthz").await.0, 200);
}

#[tokio::test]
async fn optional_backends_do_not_hold_readiness() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.optional]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--crash-on-start"]
        "#,
    )
    .await;
    let mut status = 0;
    for _ in 0..40 {
        status = readyz(&gw).await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "only required backends decide readiness");
}
