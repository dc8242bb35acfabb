//! The 2026-07-28 face over a legacy backend that asks its client mid-call
//! (sampling, elicitation, roots): the bridge's `input_required` with a sealed
//! `requestState`, the retry that completes the same backend call, refusals of
//! tampered or foreign states, a retry that never comes, and
//! `subscriptions/listen` acknowledging then delivering only what was asked.

mod common;

use std::time::Duration;

use common::modern_host::{answer, modern, modern_with};
use common::{TestGateway, logged, wait_for};
use serde_json::{Value, json};

/// An HTTP backend (attribution by the response stream the request came on)
/// whose tools `ask_sampling`, `ask_elicit`, `ask_roots` ask the client.
async fn asker() -> (common::FakeHttp, TestGateway) {
    let fx = common::FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.ask]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    (fx, gw)
}

#[tokio::test]
async fn a_legacy_backends_request_becomes_input_required_and_the_retry_completes() {
    let (_fx, gw) = asker().await;
    let c = gw.client();
    let caps = json!({"sampling": {}});
    let call = json!({"name": "ask__ask_sampling", "arguments": {}});
    let (body, h) = modern_with(json!(1), "tools/call", call.clone(), caps.clone());
    let v = answer(&c, &body, &h).await;
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required", "{v}");
    let requests = r["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{v}");
    let (key, ask) = requests.iter().next().unwrap();
    assert_eq!(ask["method"], "sampling/createMessage", "{v}");
    assert_eq!(
        ask["params"]["maxTokens"], 10,
        "the backend's request, verbatim: {v}"
    );
    let state = r["requestState"].as_str().expect("requestState").to_owned();
    // The retry: a new id, the same call, the answers and the state.
    let mut retry = call.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] = json!({ key: {
        "role": "assistant", "content": {"type": "text", "text": "four"}, "model": "test"
    }});
    let (body, h) = modern_with(json!(2), "tools/call", retry.clone(), caps.clone());
    let v = answer(&c, &body, &h).await;
    assert_eq!(v["id"], 2, "{v}");
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("four"),
        "the backend got the host's answer: {v}"
    );
    // A replay of the same state finds nothing to resume: never a second run.
    let (body, h) = modern_with(json!(3), "tools/call", retry, caps);
    let v = answer(&c, &body, &h).await;
    assert!(v["error"].is_object(), "{v}");
    assert_eq!(gw.gateway().session_count(), 0);
}

#[tokio::test]
async fn input_required_never_asks_what_the_request_did_not_declare() {
    let (_fx, gw) = asker().await;
    let c = gw.client();
    for (tool, caps) in [
        ("ask__ask_sampling", json!({})),
        ("ask__ask_elicit", json!({"sampling": {}})),
        ("ask__ask_roots", json!({"elicitation": {}})),
    ] {
        let call = json!({"name": tool, "arguments": {}});
        let (body, h) = modern_with(json!(1), "tools/call", call, caps);
        let v = answer(&c, &body, &h).await;
        assert_ne!(v["result"]["resultType"], "input_required", "{tool}: {v}");
        let text = v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.starts_with("error:"),
            "the backend was refused, the call answered: {v}"
        );
    }
}

#[tokio::test]
async fn a_tampered_or_foreign_request_state_is_refused_and_missing_answers_are_asked_again() {
    let (_fx, gw) = asker().await;
    let c = gw.client();
    let call = json!({"name": "ask__ask_elicit", "arguments": {}});
    let caps = json!({"elicitation": {"form": {}}});
    let (body, h) = modern_with(json!(1), "tools/call", call.clone(), caps.clone());
    let v = answer(&c, &body, &h).await;
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    let state = v["result"]["requestState"].as_str().unwrap().to_owned();
    let key = v["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // Altered state, and the state on another call: -32602.
    let mut flipped = state.clone().into_bytes();
    flipped[2] = if flipped[2] == b'A' { b'B' } else { b'A' };
    let mut altered = call.clone();
    altered["requestState"] = json!(String::from_utf8(flipped).unwrap());
    let mut other = json!({"name": "ask__ask_elicit", "arguments": {"x": 1}});
    other["requestState"] = json!(state.clone());
    for (i, params) in [altered, other].into_iter().enumerate() {
        let (body, h) = modern_with(json!(10 + i), "tools/call", params, caps.clone());
        let v = answer(&c, &body, &h).await;
        assert_eq!(v["error"]["code"], -32602, "{v}");
    }
    // An answer for a key never asked is ignored; the real key, still missing,
    // gets a new input_required, not an error.
    let mut retry = call.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] = json!({"never-asked": {"action": "accept"}});
    let (body, h) = modern_with(json!(20), "tools/call", retry, caps.clone());
    let v = answer(&c, &body, &h).await;
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    assert!(
        v["result"]["inputRequests"].get(&key).is_some(),
        "asked again: {v}"
    );
    let state = v["result"]["requestState"].as_str().unwrap().to_owned();
    let mut done = call;
    done["requestState"] = json!(state);
    done["inputResponses"] = json!({ &key: {"action": "accept", "content": {"x": 3}}});
    let (body, h) = modern_with(json!(21), "tools/call", done, caps);
    let v = answer(&c, &body, &h).await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"x\":3"),
        "{v}"
    );
}

#[tokio::test]
async fn a_retry_that_never_comes_cancels_the_backend_call() {
    let fx = common::FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        input_required_timeout = "1s"
        [backends.ask]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    let c = gw.client();
    let call = json!({"name": "ask__ask_roots", "arguments": {}});
    let (body, h) = modern_with(json!(1), "tools/call", call, json!({"roots": {}}));
    let v = answer(&c, &body, &h).await;
    assert_eq!(v["result"]["resultType"], "input_required", "{v}");
    let cancelled = || {
        fx.calls("notifications/cancelled").iter().any(|r| {
            r.body.as_ref().unwrap_or(&Value::Null)["params"]["reason"]
                .as_str()
                .is_some_and(|s| s.contains("did not retry"))
        })
    };
    assert!(
        wait_for(Duration::from_secs(5), cancelled).await,
        "cancelled upstream after the timeout: {:?}",
        fx.log()
            .iter()
            .map(|r| r.rpc_method().map(str::to_owned))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn listen_acknowledges_then_delivers_only_what_was_asked_tagged_with_its_id() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.sub]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--subscribe", "--log", "${TEST_DIR}/sub.log"]
        "#,
    )
    .await;
    let c = gw.client();
    let (body, h) = modern(
        json!("L"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["sub+fx://static", "nowhere://x"]}}),
    );
    let extra: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut stream = c.open_with(&extra, &body).await;
    assert!(stream.is_sse());
    let ack = stream.next(Duration::from_secs(5)).await.expect("ack");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["sub+fx://static"]}),
        "the subset served: {ack}"
    );
    let log = gw.dir.path("sub.log");
    let subscribed = || {
        logged(&log, "resources/subscribe")
            .iter()
            .any(|e| e["msg"]["params"]["uri"] == "fx://static")
    };
    assert!(
        wait_for(Duration::from_secs(5), subscribed).await,
        "subscribed at the backend"
    );
    // An update of the subscribed URI, through a modern tools/call of `touch`.
    let (body, h) = modern(
        json!(2),
        "tools/call",
        json!({"name": "sub__touch", "arguments": {"uri": "fx://static"}}),
    );
    let r = answer(&c, &body, &h).await;
    assert_eq!(r["result"]["content"][0]["text"], "touched", "{r}");
    let u = stream
        .next(Duration::from_secs(5))
        .await
        .expect("an update");
    assert_eq!(u["method"], "notifications/resources/updated", "{u}");
    assert_eq!(u["params"]["uri"], "sub+fx://static", "{u}");
    assert_eq!(
        u["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    // Closing the stream unsubscribes at the backend.
    drop(stream);
    let unsubscribed = || !logged(&log, "resources/unsubscribe").is_empty();
    assert!(
        wait_for(Duration::from_secs(8), unsubscribed).await,
        "unsubscribed after close"
    );
}
