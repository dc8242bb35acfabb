//! Sampling, elicitation and roots requests from per-session backends (HTTP and
//! stdio) reach the host on the POST stream with a gateway id; the host's answer
//! (202) completes the tool. Without the capability the backend gets an error at
//! once and nothing reaches the host.

mod common;

use std::time::Duration;

use common::{FakeHttp, McpClient, TestGateway};
use serde_json::{Value, json};
use tokio::time::Instant;

fn config(url: &str) -> String {
    format!(
        r#"
        [backends.asker]
        type = "http"
        url = "{url}"
        [backends.askstd]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        mode = "per_session"
        "#
    )
}

async fn ask_and_answer(s: &McpClient, tool: &str, method: &str, answer: Value) -> String {
    let call = json!({"jsonrpc": "2.0", "id": format!("call-{tool}"), "method": "tools/call",
                      "params": {"name": tool, "arguments": {}}});
    let mut stream = s.open(&call).await;
    let req = stream
        .next(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("{tool}: no request relayed"));
    assert_eq!(req["method"], method, "{req}");
    let id = req["id"].clone();
    assert!(id.is_string() || id.is_i64(), "{req}");
    let r = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": id, "result": answer}).to_string(),
        )
        .await;
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty());
    let done = stream
        .next(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("{tool}: no result"));
    assert_eq!(done["id"], call["id"], "{done}");
    done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn server_to_client_requests_are_relayed_and_answered() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&config(&fx.url)).await;
    let s = gw
        .session_with(
            json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": true}}),
        )
        .await;
    for prefix in ["asker", "askstd"] {
        let text = ask_and_answer(
            &s,
            &format!("{prefix}__ask_elicit"),
            "elicitation/create",
            json!({"action": "accept", "content": {"x": 1}}),
        )
        .await;
        assert!(text.contains(r#""x":1"#), "{prefix}: {text}");
        let text = ask_and_answer(
            &s,
            &format!("{prefix}__ask_sampling"),
            "sampling/createMessage",
            json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}),
        )
        .await;
        assert!(text.contains(r#""text":"4""#), "{prefix}: {text}");
        let text = ask_and_answer(
            &s,
            &format!("{prefix}__ask_roots"),
            "roots/list",
            json!({"roots": [{"uri": "file:///w", "name": "w"}]}),
        )
        .await;
        assert!(text.contains("file:///w"), "{prefix}: {text}");
    }
}

#[tokio::test]
async fn without_the_capability_the_backend_gets_an_error_quickly() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&config(&fx.url)).await;
    let s = gw.session().await;
    for tool in [
        "asker__ask_sampling",
        "askstd__ask_sampling",
        "askstd__ask_roots",
    ] {
        let started = Instant::now();
        let r = s.call_tool(tool, json!({})).await;
        assert!(started.elapsed() < Duration::from_secs(3), "{tool}");
        let text = r.result()["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("error:"), "{tool}: {text}");
        assert!(
            r.related
                .iter()
                .all(|m| m.get("method").is_none() || m.get("id").is_none()),
            "nothing asked of the host: {:?}",
            r.related
        );
    }
}

#[tokio::test]
async fn an_unanswered_client_request_fails_upstream_and_is_cancelled_downstream() {
    let gw = TestGateway::start(
        r#"
        [backends.ask]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ask.log"]
        mode = "per_session"
        timeout = "700ms"
        "#,
    )
    .await;
    let log = gw.dir.path("ask.log");
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let mut listen = s.get_stream().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "ask__ask_elicit", "arguments": {}}});
    let mut stream = s.open(&call).await;
    let req = stream.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(req["method"], "elicitation/create");
    // The host never answers: the relayed request expires before the backend's
    // own call timeout, so the backend still gets to handle the refusal.
    let done = stream.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(done["id"], 1);
    let refused = done["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("error:"));
    assert!(refused, "the backend saw the refusal: {done}");
    let cancel = listen.next(Duration::from_secs(3)).await;
    assert_eq!(
        cancel
            .as_ref()
            .map(|c| (c["method"].clone(), c["params"]["requestId"].clone())),
        Some((json!("notifications/cancelled"), req["id"].clone())),
        "{cancel:?}"
    );
    let answered = || {
        common::read_log(&log).iter().any(|e| {
            e["msg"]["id"] == 1000
                && e["msg"].get("error").is_some()
                && e["msg"].get("method").is_none()
        })
    };
    assert!(
        common::wait_for(Duration::from_secs(2), answered).await,
        "backend got an error"
    );
    let late = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "cancel"}}).to_string(),
        )
        .await;
    assert_eq!(late.status, 202, "a late answer is accepted and ignored");
}

#[tokio::test]
async fn answers_to_unknown_or_already_answered_requests_are_ignored() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.ask]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/ask.log"]
        mode = "per_session"
        "#,
    )
    .await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    for id in [json!(424_242), json!("never-sent"), json!(0)] {
        let r = s
            .post(
                &[],
                json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept"}}).to_string(),
            )
            .await;
        assert_eq!(r.status, 202, "unknown id {id}");
        let r = s
            .post(
                &[],
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "x"}})
                    .to_string(),
            )
            .await;
        assert_eq!(r.status, 202, "unknown id {id} (error answer)");
    }
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "ask__ask_elicit", "arguments": {}}});
    let mut stream = s.open(&call).await;
    let req = stream.next(Duration::from_secs(5)).await.expect("relayed");
    assert_eq!(req["method"], "elicitation/create");
    for n in [1, 2] {
        let answer = json!({"jsonrpc": "2.0", "id": req["id"],
                            "result": {"action": "accept", "content": {"x": n}}});
        assert_eq!(s.post(&[], answer.to_string()).await.status, 202);
    }
    let done = stream.next(Duration::from_secs(5)).await.expect("result");
    assert_eq!(done["id"], 5);
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(r#""x":1"#), "the first answer counts: {text}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answers = common::read_log(&gw.dir.path("ask.log"))
        .into_iter()
        .filter(|e| e["msg"].get("method").is_none() && e["msg"].get("id").is_some())
        .count();
    assert_eq!(answers, 1, "the backend got exactly one answer");
    assert_eq!(s.request("ping", json!({})).await.result(), &json!({}));
}

#[tokio::test]
async fn roots_list_changed_reaches_only_the_sessions_own_backends() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.mine]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/mine.log"]
        mode = "per_session"
        [backends.shared]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/shared.log"]
        "#,
    )
    .await;
    let caps = json!({"roots": {"listChanged": true}});
    let (a, b) = (
        gw.session_with(caps.clone()).await,
        gw.session_with(caps).await,
    );
    let mut pids = Vec::new();
    for s in [&a, &b] {
        let r = s.call_tool("mine__whoami", json!({})).await;
        assert!(r.response.get("result").is_some());
        let r = s.call_tool("shared__whoami", json!({})).await;
        assert!(r.response.get("result").is_some());
        let calls = common::logged_calls(&gw.dir.path("mine.log"), "whoami");
        pids.push(calls.last().unwrap()["pid"].clone());
    }
    assert_ne!(pids[0], pids[1], "one child per session");
    let r = a.notify("notifications/roots/list_changed", None).await;
    assert_eq!(r.status, 202);
    let got = || common::logged(&gw.dir.path("mine.log"), "notifications/roots/list_changed");
    assert!(
        common::wait_for(Duration::from_secs(3), || !got().is_empty()).await,
        "a's own backend hears it"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = got();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["pid"], pids[0], "only a's child");
    assert!(
        common::logged(
            &gw.dir.path("shared.log"),
            "notifications/roots/list_changed"
        )
        .is_empty(),
        "a shared connection declared no roots and is not told"
    );
}
