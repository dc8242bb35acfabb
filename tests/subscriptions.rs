//! Resource subscriptions, including to a URI no backend owns: refcounted per
//! (backend, URI) on a shared backend — subscribed once, unsubscribed with the last
//! subscriber or when sessions end —, `notifications/resources/updated` only to
//! subscribed sessions with the gateway-visible URI, -32002 for URIs nobody owns,
//! -32601 for a backend without `resources.subscribe`.

mod common;

use std::time::Duration;

use common::{McpClient, TestGateway, logged, wait_for};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[server]
metrics_listen = "off"
[backends.sub]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--subscribe", "--log", "${TEST_DIR}/sub.log"]
[backends.plain]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--log", "${TEST_DIR}/plain.log"]
"#;

async fn sub(s: &McpClient, method: &str, uri: &str) -> Value {
    s.request(method, json!({ "uri": uri })).await.response
}

/// The URIs of `resources/subscribe` (or `unsubscribe`) the backend received.
fn upstream(gw: &TestGateway, method: &str) -> Vec<String> {
    logged(&gw.dir.path("sub.log"), method)
        .iter()
        .filter_map(|e| e.pointer("/msg/params/uri").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// Makes the backend announce an update of `uri` (even if unsubscribed there).
async fn touch(s: &McpClient, uri: &str) {
    let r = s
        .call_tool("sub__touch", json!({ "uri": uri, "force": true }))
        .await;
    assert_eq!(
        r.result()["content"][0]["text"],
        "touched",
        "{}",
        r.response
    );
}

/// `notifications/resources/updated` URIs arriving on `stream` within `within`.
async fn updates(stream: &mut common::SseStream, within: Duration) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = stream.next(within).await {
        if m["method"] == "notifications/resources/updated" {
            out.push(m["params"]["uri"].as_str().unwrap_or_default().to_owned());
        }
    }
    out
}

#[tokio::test]
async fn shared_backend_is_subscribed_once_and_updates_reach_only_subscribers() {
    let gw = TestGateway::start(CONFIG).await;
    let init = gw.client().initialize(json!({})).await;
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"], true,
        "one backend offers subscriptions: {init}"
    );
    let (a, b, c) = (gw.session().await, gw.session().await, gw.session().await);
    let (mut la, mut lb, mut lc) = (
        a.get_stream().await,
        b.get_stream().await,
        c.get_stream().await,
    );

    for s in [&a, &b] {
        let r = sub(s, "resources/subscribe", "sub+fx://static").await;
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let r = sub(&a, "resources/subscribe", "sub+fx://item/5").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(
        upstream(&gw, "resources/subscribe"),
        ["fx://static", "fx://item/5"],
        "the shared backend is subscribed once per URI, with its own URI"
    );

    // c (not subscribed) triggers the update: it reaches a and b only.
    touch(&c, "fx://static").await;
    assert_eq!(
        updates(&mut la, Duration::from_millis(700)).await,
        ["sub+fx://static"]
    );
    assert_eq!(
        updates(&mut lb, Duration::from_millis(300)).await,
        ["sub+fx://static"]
    );
    assert!(
        updates(&mut lc, Duration::from_millis(300))
            .await
            .is_empty()
    );

    touch(&c, "fx://item/5").await;
    assert_eq!(
        updates(&mut la, Duration::from_millis(700)).await,
        ["sub+fx://item/5"]
    );
    assert!(
        updates(&mut lb, Duration::from_millis(300))
            .await
            .is_empty()
    );

    // An update for a URI nobody subscribed to goes nowhere.
    touch(&a, "fx://item/99").await;
    assert!(
        updates(&mut la, Duration::from_millis(400))
            .await
            .is_empty()
    );

    // a leaves: still one subscriber, so no upstream unsubscribe yet.
    let r = sub(&a, "resources/unsubscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(upstream(&gw, "resources/unsubscribe").is_empty());
    touch(&c, "fx://static").await;
    assert!(
        updates(&mut la, Duration::from_millis(400))
            .await
            .is_empty(),
        "a unsubscribed"
    );
    assert_eq!(
        updates(&mut lb, Duration::from_millis(700)).await,
        ["sub+fx://static"]
    );

    // b, the last subscriber, leaves: the backend is unsubscribed.
    let r = sub(&b, "resources/unsubscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(upstream(&gw, "resources/unsubscribe"), ["fx://static"]);

    // a's remaining subscription ends with its session (DELETE).
    assert_eq!(a.delete().await.status, 200);
    assert!(
        wait_for(Duration::from_secs(3), || upstream(
            &gw,
            "resources/unsubscribe"
        )
        .len()
            == 2)
        .await,
        "{:?}",
        upstream(&gw, "resources/unsubscribe")
    );
    assert_eq!(upstream(&gw, "resources/unsubscribe")[1], "fx://item/5");
    assert_eq!(
        upstream(&gw, "resources/subscribe").len(),
        2,
        "no resubscription"
    );
}

#[tokio::test]
async fn session_expiry_unsubscribes_the_last_subscriber() {
    let gw = TestGateway::start(&CONFIG.replace(
        "metrics_listen = \"off\"",
        "metrics_listen = \"off\"\nsession_idle_timeout = \"300ms\"",
    ))
    .await;
    let a = gw.session().await;
    let r = sub(&a, "resources/subscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(
        wait_for(Duration::from_secs(4), || upstream(
            &gw,
            "resources/unsubscribe"
        ) == ["fx://static"])
        .await,
        "an expired session's subscriptions end upstream"
    );
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(a.post(&[], ping).await.status, 404, "the session expired");
}

#[tokio::test]
async fn bad_subscriptions_get_the_spec_errors_and_reach_no_backend() {
    let gw = TestGateway::start(CONFIG).await;
    let s = gw.session().await;
    for uri in ["zz+fx://static", "file:///nowhere", "fx://static"] {
        let r = sub(&s, "resources/subscribe", uri).await;
        assert_eq!(r["error"]["code"], -32002, "{uri}: {r}");
        assert_eq!(r["error"]["data"]["uri"], uri, "{r}");
    }
    let r = sub(&s, "resources/subscribe", "plain+fx://static").await;
    assert_eq!(r["error"]["code"], -32601, "no resources.subscribe: {r}");
    let r = s.request("resources/subscribe", json!({})).await.response;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(logged(&gw.dir.path("plain.log"), "resources/subscribe").is_empty());
    assert!(upstream(&gw, "resources/subscribe").is_empty());
    // Unsubscribing what was never subscribed is harmless and not forwarded.
    let r = sub(&s, "resources/unsubscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(upstream(&gw, "resources/unsubscribe").is_empty());
}

#[tokio::test]
async fn per_session_backends_are_subscribed_per_session_and_updates_stay_there() {
    let gw = TestGateway::start(&CONFIG.replace(
        "args = [\"--subscribe\", \"--log\", \"${TEST_DIR}/sub.log\"]",
        "args = [\"--subscribe\", \"--log\", \"${TEST_DIR}/sub.log\"]\nmode = \"per_session\"",
    ))
    .await;
    let (a, b) = (gw.session().await, gw.session().await);
    let (mut la, mut lb) = (a.get_stream().await, b.get_stream().await);
    for s in [&a, &b] {
        let r = sub(s, "resources/subscribe", "sub+fx://static").await;
        assert_eq!(r["result"], json!({}), "{r}");
    }
    assert_eq!(
        upstream(&gw, "resources/subscribe").len(),
        2,
        "one per session connection"
    );
    // a's own backend process announces an update: only a hears it.
    touch(&a, "fx://static").await;
    assert_eq!(
        updates(&mut la, Duration::from_millis(700)).await,
        ["sub+fx://static"]
    );
    assert!(
        updates(&mut lb, Duration::from_millis(300))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_restarted_shared_backend_is_subscribed_again() {
    let gw = TestGateway::start(CONFIG).await;
    let (a, c) = (gw.session().await, gw.session().await);
    let mut la = a.get_stream().await;
    let r = sub(&a, "resources/subscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");
    let log = gw.dir.path("sub.log");
    let first = *common::logged_pids(&log).iter().next().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || common::logged_pids(&log).len()
            == 2)
        .await,
        "restarted"
    );
    // The new process is told about the subscription it never saw...
    assert!(
        wait_for(Duration::from_secs(3), || upstream(
            &gw,
            "resources/subscribe"
        )
        .len()
            == 2)
        .await,
        "resubscribed after the restart: {:?}",
        upstream(&gw, "resources/subscribe")
    );
    // ...so its updates (it announces subscribed URIs only) reach the subscriber.
    let r = c
        .call_tool("sub__touch", json!({ "uri": "fx://static" }))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "touched");
    assert_eq!(
        updates(&mut la, Duration::from_millis(700)).await,
        ["sub+fx://static"]
    );
}

/// A long-lived session's standalone stream outlives the event buffer (256 events per
/// session): a `GET` opened after that still gets the updates, and a new `GET` is not
/// sent again what an earlier one was. The 60-minute soak found every `GET` silent
/// once anything had been evicted (its resumption from "before the first event" was
/// refused and the stream attached to nothing).
#[tokio::test]
async fn a_get_stream_reopened_after_many_updates_gets_each_update_once() {
    let gw = TestGateway::start(CONFIG).await;
    let a = gw.session().await;
    let r = sub(&a, "resources/subscribe", "sub+fx://static").await;
    assert_eq!(r["result"], json!({}), "{r}");

    let mut first = a.get_stream().await;
    for i in 0..300 {
        touch(&a, "fx://static").await;
        let m = first.next(Duration::from_secs(5)).await;
        assert_eq!(
            m.as_ref().map(|m| &m["params"]["uri"]),
            Some(&json!("sub+fx://static")),
            "update {i} on the first GET: {m:?}"
        );
    }
    drop(first);

    for round in 0..2 {
        let mut again = a.get_stream().await;
        touch(&a, "fx://static").await;
        assert_eq!(
            updates(&mut again, Duration::from_millis(1500)).await,
            ["sub+fx://static"],
            "round {round}: the new update, once, and none of the 300 earlier ones"
        );
    }
}

/// A resource link in a tool result need not appear in `resources/list` (MCP
/// 2025-11-25, server/tools, resource links), so a subscription to a URI the
/// backend does not list is the backend's to answer: forwarded, not refused.
#[tokio::test]
async fn a_subscription_to_a_uri_the_backend_does_not_list_is_forwarded() {
    let gw = TestGateway::start(CONFIG).await;
    let s = gw.session().await;
    let r = sub(&s, "resources/subscribe", "sub+fx://unlisted/7").await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(
        upstream(&gw, "resources/subscribe"),
        ["fx://unlisted/7"],
        "the backend's own URI reaches it"
    );
}
