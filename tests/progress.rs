//! Progress tokens (string, integer, none) on three sessions sharing one stdio
//! backend: each sees only its own, monotonic, on its POST stream.

mod common;

use common::{FakeHttp, McpClient, Rpc, TestGateway};
use serde_json::{Value, json};

async fn slow_progress(s: &McpClient, token: Option<Value>) -> Rpc {
    slow_progress_on(s, "fx__slow_progress", token).await
}

async fn slow_progress_on(s: &McpClient, tool: &str, token: Option<Value>) -> Rpc {
    let mut params = json!({"name": tool, "arguments": {"n": 5, "interval_ms": 60}});
    if let Some(t) = token {
        params["_meta"] = json!({ "progressToken": t });
    }
    s.request("tools/call", params).await
}

fn progress_of(r: &Rpc) -> Vec<&Value> {
    r.related
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect()
}

#[tokio::test]
async fn each_session_sees_only_its_own_progress_in_order() {
    let gw =
        TestGateway::start("[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n").await;
    let (s1, s2, s3) = (gw.session().await, gw.session().await, gw.session().await);
    let (r1, r2, r3) = tokio::join!(
        slow_progress(&s1, Some(json!("tok-A"))),
        slow_progress(&s2, Some(json!(7))),
        slow_progress(&s3, None),
    );
    for (r, token) in [(&r1, json!("tok-A")), (&r2, json!(7))] {
        assert!(
            r.content_type.starts_with("text/event-stream"),
            "{}",
            r.content_type
        );
        let p = progress_of(r);
        assert_eq!(p.len(), 5, "{:?}", r.related);
        let mut last = f64::MIN;
        for n in p {
            assert_eq!(n["params"]["progressToken"], token, "{n}");
            let v = n["params"]["progress"].as_f64().unwrap();
            assert!(v > last, "monotonic: {v} after {last}");
            last = v;
        }
        assert_eq!(r.result()["content"][0]["text"], "progressed 5");
    }
    assert!(
        progress_of(&r3).is_empty(),
        "no token, no progress: {:?}",
        r3.related
    );
    assert_eq!(r3.result()["content"][0]["text"], "progressed 5");
}

#[tokio::test]
async fn progress_from_an_http_backend_keeps_the_hosts_token() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        "[backends.web]\ntype = \"http\"\nurl = \"{}\"\n",
        fx.url
    ))
    .await;
    let (s1, s2) = (gw.session().await, gw.session().await);
    let (r1, r2) = tokio::join!(
        slow_progress_on(&s1, "web__slow_progress", Some(json!("p-1"))),
        slow_progress_on(&s2, "web__slow_progress", Some(json!(1))),
    );
    for (r, token) in [(&r1, json!("p-1")), (&r2, json!(1))] {
        let p = progress_of(r);
        assert_eq!(p.len(), 5, "{:?}", r.related);
        assert!(
            p.iter().all(|n| n["params"]["progressToken"] == token),
            "{p:?}"
        );
    }
}

#[tokio::test]
async fn progress_for_a_token_the_backend_was_never_given_is_dropped() {
    let dir = common::TestDir::new();
    std::fs::write(
        dir.path("tools.json"),
        json!([{"name": "bogus_progress", "inputSchema": {"type": "object"}}]).to_string(),
    )
    .unwrap();
    let gw = TestGateway::start_in(
        dir,
        "[server]\nmetrics_listen = \"off\"\n[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\nargs = [\"--tools-json\", \"${TEST_DIR}/tools.json\"]\n",
    )
    .await;
    let (a, b) = (gw.session().await, gw.session().await);
    let mut listen_b = b.get_stream().await;
    let (ra, rb) = tokio::join!(
        a.request(
            "tools/call",
            json!({"name": "fx__bogus_progress", "arguments": {}, "_meta": {"progressToken": "a-own"}})
        ),
        slow_progress(&b, Some(json!("b-own"))),
    );
    assert_eq!(ra.result()["content"][0]["text"], "bogus sent");
    let pa = progress_of(&ra);
    assert!(
        pa.iter().all(|n| n["params"]["progressToken"] == "a-own"),
        "only a's own token reaches a: {pa:?}"
    );
    let pb = progress_of(&rb);
    assert_eq!(pb.len(), 5, "{:?}", rb.related);
    assert!(
        pb.iter().all(|n| n["params"]["progressToken"] == "b-own"),
        "{pb:?}"
    );
    while let Some(m) = listen_b.next(std::time::Duration::from_millis(300)).await {
        assert_ne!(
            m["method"], "notifications/progress",
            "stray progress on b's GET stream: {m}"
        );
    }
}
