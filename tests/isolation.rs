//! Two hosts, two backends, nothing crosses sessions: two concurrent sessions drive
//! two per-session backends (Streamable HTTP and stdio) with progress, logs,
//! sampling, elicitation and roots relays, cancellation and `list_changed` at the
//! same time; each sees only its own traffic.

mod common;

use std::time::Duration;

use common::{FakeHttp, McpClient, SseStream, TestGateway, read_log, wait_for};
use serde_json::{Value, json};

/// Sends `tools/call tool` and answers the one server→client request it causes
/// with `answer`; returns every message of the stream (request and response).
async fn ask(s: &McpClient, id: &str, tool: &str, method: &str, answer: Value) -> Vec<Value> {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": {}}});
    let mut stream = s.open(&call).await;
    let req = stream
        .next(Duration::from_secs(5))
        .await
        .expect("relayed request");
    assert_eq!(req["method"], method, "{req}");
    let r = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": req["id"], "result": answer}).to_string(),
        )
        .await;
    assert_eq!(r.status, 202);
    let done = stream.next(Duration::from_secs(5)).await.expect("result");
    assert_eq!(done["id"], id, "{done}");
    vec![req, done]
}

/// Everything one host does; returns every message it received on POST streams.
async fn drive(s: &McpClient, tag: &str, log: &std::path::Path) -> Vec<Value> {
    let mut seen = Vec::new();

    let p = s
        .request(
            "tools/call",
            json!({"name": "s__slow_progress", "arguments": {"n": 4, "interval_ms": 40},
                   "_meta": {"progressToken": format!("{tag}-p")}}),
        )
        .await;
    let progress: Vec<&Value> = p
        .related
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 4, "{tag}: {:?}", p.related);
    assert!(
        progress
            .iter()
            .all(|m| m["params"]["progressToken"] == format!("{tag}-p"))
    );
    seen.extend(p.related.clone());
    seen.push(p.response.clone());

    let l = s
        .call_tool(
            "h__log",
            json!({"level": "warning", "text": format!("{tag}-log")}),
        )
        .await;
    let logs: Vec<&Value> = l
        .related
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 1, "{tag}: {:?}", l.related);
    assert_eq!(logs[0]["params"]["data"], format!("{tag}-log"));
    assert_eq!(logs[0]["params"]["logger"], "h/fx");
    seen.extend(l.related.clone());

    let sampling = json!({"role": "assistant", "content": {"type": "text", "text": format!("{tag}-sample")}, "model": "m"});
    let got = ask(
        s,
        &format!("{tag}-1"),
        "s__ask_sampling",
        "sampling/createMessage",
        sampling,
    )
    .await;
    assert!(
        got[1].to_string().contains(&format!("{tag}-sample")),
        "{got:?}"
    );
    seen.extend(got);
    let elicit = json!({"action": "accept", "content": {"x": tag.len()}});
    let got = ask(
        s,
        &format!("{tag}-2"),
        "h__ask_elicit",
        "elicitation/create",
        elicit,
    )
    .await;
    assert!(got[1].to_string().contains("accept"), "{got:?}");
    seen.extend(got);
    let roots = json!({"roots": [{"uri": format!("file:///{tag}"), "name": tag}]});
    let got = ask(s, &format!("{tag}-3"), "s__ask_roots", "roots/list", roots).await;
    assert!(
        got[1].to_string().contains(&format!("file:///{tag}")),
        "{got:?}"
    );
    seen.extend(got);

    // Cancellation: the host cancels its long call; only its own child hears it.
    let call = json!({"jsonrpc": "2.0", "id": format!("{tag}-slow"), "method": "tools/call",
                      "params": {"name": "s__slow_task", "arguments": {"s": 5}}});
    let mut slow = s.open(&call).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = s
        .notify(
            "notifications/cancelled",
            Some(json!({"requestId": format!("{tag}-slow"), "reason": tag})),
        )
        .await;
    assert_eq!(r.status, 202);
    while let Some(m) = slow.next(Duration::from_millis(500)).await {
        assert_ne!(
            m["id"],
            format!("{tag}-slow"),
            "no response after a cancel: {m}"
        );
        seen.push(m);
    }
    // The child logs the cancel when it reads it: wait for the line, not for luck.
    let heard = || {
        read_log(log)
            .iter()
            .any(|e| e["event"] == "cancelled" && e["tool"] == "slow_task")
    };
    assert!(
        wait_for(Duration::from_secs(5), heard).await,
        "{tag}: the backend got the cancel"
    );

    let a = s
        .call_tool("h__add_tool", json!({"name": format!("{tag}_tool")}))
        .await;
    seen.extend(a.related.clone());
    seen.push(a.response.clone());
    seen
}

async fn drain(stream: &mut SseStream, within: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(m) = stream.next(within).await {
        out.push(m);
    }
    out
}

#[tokio::test]
async fn two_sessions_on_two_per_session_backends_never_see_each_others_traffic() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [server]
        metrics_listen = "off"
        [backends.h]
        type = "http"
        url = "{}"
        mode = "per_session"
        [backends.s]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        args = ["--log", "${{TEST_DIR}}/s.log"]
        mode = "per_session"
        "#,
        fx.url
    ))
    .await;
    let caps = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}});
    let (a, b) = (
        gw.session_with(caps.clone()).await,
        gw.session_with(caps).await,
    );
    let (mut ga, mut gb) = (a.get_stream().await, b.get_stream().await);
    let log = gw.dir.path("s.log");
    let (seen_a, seen_b) = tokio::join!(drive(&a, "alpha", &log), drive(&b, "bravo", &log));
    let (get_a, get_b) = tokio::join!(
        drain(&mut ga, Duration::from_millis(800)),
        drain(&mut gb, Duration::from_millis(800))
    );

    for (me, other, post, get) in [
        ("alpha", "bravo", &seen_a, &get_a),
        ("bravo", "alpha", &seen_b, &get_b),
    ] {
        let all = serde_json::to_string(&(post, get)).unwrap();
        assert!(all.contains(me));
        assert!(!all.contains(other), "{me} saw {other}'s traffic: {all}");
        assert!(
            get.iter().all(|m| m.get("method").is_some()),
            "{me}: no responses on the GET stream: {get:?}"
        );
        let changed = get
            .iter()
            .filter(|m| m["method"] == "notifications/tools/list_changed")
            .count();
        assert!(
            (1..=2).contains(&changed),
            "{me}: the shared catalogue changed, every session hears it: {get:?}"
        );
    }
    // One cancel per session reached the backend, each in that session's own child.
    let cancels: Vec<Value> = read_log(&log)
        .into_iter()
        .filter(|e| e["event"] == "cancelled" && e["tool"] == "slow_task")
        .collect();
    assert_eq!(cancels.len(), 2, "{cancels:?}");
    assert_ne!(cancels[0]["pid"], cancels[1]["pid"], "{cancels:?}");
    let tools = common::names(&a.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"h__alpha_tool".into()) && tools.contains(&"h__bravo_tool".into()));
}
