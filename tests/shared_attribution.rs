//! Server→client requests and logs of a shared stdio connection (`shared`, and
//! `auto`, the default, until the backend shows it keeps state per client): one
//! that arrives while exactly one host call is in flight on the connection
//! reaches that call's POST stream; otherwise it is never guessed — the backend
//! gets an error at once, no host sees anything, the host calls finish normally,
//! and `mcpgate_unroutable_backend_requests_total` counts it.

mod common;

use std::time::Duration;

use common::{McpClient, TestGateway, metric, scrape, text_of};
use serde_json::{Value, json};
use tokio::time::Instant;

const SAMPLING: &str = r#"{"sampling": {}}"#;

fn config(mode: &str) -> String {
    format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.fx]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        {mode}
        "#
    )
}

fn caps() -> Value {
    serde_json::from_str(SAMPLING).unwrap()
}

/// Calls `fx__ask_sampling` with question `tag`; answers every sampling request
/// that reaches this host (which must be its own, carrying `tag`) and returns the
/// tool's text once the call ends.
async fn sample(s: &McpClient, tag: &str, delay_ms: u64) -> String {
    let id = format!("call-{tag}");
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "fx__ask_sampling", "arguments": {"text": tag, "delay_ms": delay_ms}}});
    let mut stream = s.open(&call).await;
    loop {
        let msg = stream
            .next(Duration::from_secs(8))
            .await
            .unwrap_or_else(|| panic!("{tag}: the call neither ended nor asked within 8 s"));
        if msg["method"] == "sampling/createMessage" {
            let asked = &msg["params"]["messages"][0]["content"]["text"];
            assert_eq!(
                asked, tag,
                "{tag} received another session's request: {msg}"
            );
            let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "result":
                {"role": "assistant", "content": {"type": "text", "text": format!("for {tag}")}, "model": "m"}});
            assert_eq!(s.post(&[], answer.to_string()).await.status, 202);
            continue;
        }
        assert!(msg.get("method").is_none(), "{tag}: unexpected {msg}");
        assert_eq!(msg["id"], id, "{msg}");
        return text_of(&msg).to_owned();
    }
}

#[tokio::test]
async fn a_lone_call_gets_its_requests_and_logs_on_a_shared_connection() {
    let gw = TestGateway::start(&config(r#"mode = "shared""#)).await;
    let s = gw
        .session_with(json!({"sampling": {}, "elicitation": {}, "roots": {}}))
        .await;
    let text = sample(&s, "lone", 0).await;
    assert!(text.contains("for lone"), "{text}");
    for (tool, method, answer) in [
        (
            "fx__ask_elicit",
            "elicitation/create",
            json!({"action": "accept", "content": {"x": 1}}),
        ),
        ("fx__ask_roots", "roots/list", json!({"roots": []})),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": tool, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let mut stream = s.open(&call).await;
        let req = stream.next(Duration::from_secs(5)).await.expect(tool);
        assert_eq!(req["method"], method, "{req}");
        let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": answer});
        assert_eq!(s.post(&[], reply.to_string()).await.status, 202);
        let done = stream.next(Duration::from_secs(5)).await.expect(tool);
        assert!(text_of(&done).starts_with("answer:"), "{done}");
    }
    let r = s
        .call_tool("fx__log", json!({"level": "error", "text": "mine"}))
        .await;
    let logs: Vec<_> = r
        .related
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 1, "{:?}", r.related);
    assert_eq!(logs[0]["params"]["data"], "mine");
}

/// Two sessions at a time each call a sampling tool, 24 rounds; no host ever
/// receives the other's request, and at least one call is served.
async fn concurrent_sampling_never_crosses_sessions(mode: &str) {
    let gw = TestGateway::start(&config(mode)).await;
    let mut delivered = 0;
    for round in 0..24u64 {
        let a = gw.session_with(caps()).await;
        let b = gw.session_with(caps()).await;
        // Interleavings: both asking at once, one asking while the other is
        // still being forwarded, both in flight before either asks.
        let (da, db) = [(0, 0), (0, 30), (30, 0), (80, 80)][(round % 4) as usize];
        let (ta, tb) = (format!("A{round}"), format!("B{round}"));
        let started = Instant::now();
        let (ra, rb) = tokio::join!(sample(&a, &ta, da), sample(&b, &tb, db));
        assert!(started.elapsed() < Duration::from_secs(5), "round {round}");
        for (tag, text) in [(&ta, &ra), (&tb, &rb)] {
            if text.starts_with("answer:") {
                assert!(text.contains(&format!("for {tag}")), "{tag}: {text}");
                delivered += 1;
            } else {
                assert!(text.starts_with("error:"), "{tag}: {text}");
            }
        }
    }
    assert!(delivered > 0, "a lone call is served");
}

#[tokio::test]
async fn concurrent_sampling_on_a_default_stdio_backend_never_crosses_sessions() {
    // The default (auto): the first request moves later sessions to their own child.
    concurrent_sampling_never_crosses_sessions("").await;
}

#[tokio::test]
async fn concurrent_sampling_on_a_shared_stdio_backend_never_crosses_sessions() {
    // Every round on the one shared child: only the lone-call rule protects hosts.
    concurrent_sampling_never_crosses_sessions(r#"mode = "shared""#).await;
}

#[tokio::test]
async fn ambiguous_requests_and_logs_are_refused_at_once_and_counted() {
    let dir = common::TestDir::new();
    std::fs::write(
        dir.path("later.json"),
        r#"[{"name":"log_later","inputSchema":{"type":"object"}}]"#,
    )
    .unwrap();
    let toml = config(
        r#"mode = "shared"
        args = ["--tools-json", "${TEST_DIR}/later.json"]"#,
    );
    let gw = TestGateway::start_in(dir, &toml).await;
    let a = gw.session_with(caps()).await;
    let b = gw.session_with(caps()).await;
    let mut b_listen = b.get_stream().await;
    let busy = tokio::spawn({
        let b = b.clone();
        async move { b.call_tool("fx__sleep", json!({"s": 1.5})).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let text = sample(&a, "two-in-flight", 0).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not at the timeout: {:?}",
        started.elapsed()
    );
    assert!(text.starts_with("error:"), "{text}");
    assert!(
        text.contains("per_session"),
        "the backend is told why: {text}"
    );
    let r = busy.await.unwrap();
    assert_eq!(text_of(&r.response), "slept", "the other call is not hurt");
    assert!(r.related.is_empty(), "{:?}", r.related);
    let counted = || async {
        let text = scrape(&gw).await;
        metric(
            &text,
            "mcpgate_unroutable_backend_requests_total",
            &[("backend", "fx")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(counted().await, 1.0);

    // A log sent when no call is in flight reaches nobody, and is counted.
    let r = a
        .call_tool("fx__log_later", json!({"delay_ms": 100, "text": "whose?"}))
        .await;
    assert_eq!(text_of(&r.response), "later");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(counted().await, 2.0);
    assert!(
        b_listen.next(Duration::from_millis(200)).await.is_none(),
        "nothing on any GET stream"
    );
}

#[tokio::test]
async fn auto_mode_gives_sessions_created_after_a_stateful_sign_their_own_connection() {
    let dir = common::TestDir::new();
    std::fs::write(
        dir.path("later.json"),
        r#"[{"name":"log_later","inputSchema":{"type":"object"}}]"#,
    )
    .unwrap();
    // The default mode (auto) for a stdio backend.
    let toml = config(
        r#"args = ["--tools-json", "${TEST_DIR}/later.json", "--log", "${TEST_DIR}/fx.log"]"#,
    );
    let gw = TestGateway::start_in(dir, &toml).await;
    let log = gw.dir.path("fx.log");
    let pid_of = |tool: &str| {
        common::logged_calls(&log, tool)
            .last()
            .map(|e| e["pid"].clone())
            .unwrap()
    };
    let a = gw.session().await;
    let r = a.call_tool("fx__whoami", json!({})).await;
    assert!(r.response.get("result").is_some());
    let shared_pid = pid_of("whoami");
    // A background log with no call in flight: the backend keeps state per client.
    let r = a
        .call_tool(
            "fx__log_later",
            json!({"delay_ms": 50, "text": "secret of A"}),
        )
        .await;
    assert_eq!(text_of(&r.response), "later");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = reqwest::get(gw.url.replace("/mcp", "/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ready: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["backends"]["fx"]["mode"], "auto", "{ready}");
    assert_eq!(ready["backends"]["fx"]["stateful"], true, "{ready}");

    // A session created from now on gets its own child; A keeps the shared one.
    let b = gw.session().await;
    let r = b.call_tool("fx__whoami", json!({})).await;
    assert!(r.response.get("result").is_some());
    assert_ne!(pid_of("whoami"), shared_pid, "B has its own connection");
    let r = a.call_tool("fx__whoami", json!({})).await;
    assert!(r.response.get("result").is_some());
    assert_eq!(pid_of("whoami"), shared_pid, "A stays on the shared one");

    // A's next background log arrives while B's call is the only one anywhere:
    // B's call is on B's own connection, so it cannot get it.
    let r = a
        .call_tool(
            "fx__log_later",
            json!({"delay_ms": 200, "text": "secret of A"}),
        )
        .await;
    assert_eq!(text_of(&r.response), "later");
    let r = b
        .call_tool("fx__delay_echo", json!({"ms": 600, "tag": "b"}))
        .await;
    assert_eq!(text_of(&r.response), "b");
    assert!(
        r.related
            .iter()
            .all(|m| m["method"] != "notifications/message"),
        "A's log reached B: {:?}",
        r.related
    );
}
