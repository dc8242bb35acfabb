//! Log messages (`notifications/message`) from backends reach only the session
//! whose call caused them, named after the backend, filtered by the level the
//! host set with `logging/setLevel`. A shared backend's log reaches a session
//! only while that session's call is the only one in flight on the connection.

mod common;

use common::{McpClient, Rpc, TestDir, TestGateway, text_of};
use serde_json::{Value, json};

fn logs(r: &Rpc) -> Vec<&Value> {
    r.related
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect()
}

async fn log(s: &McpClient, tool: &str, level: &str) -> Rpc {
    let r = s
        .call_tool(tool, json!({"level": level, "text": format!("at {level}")}))
        .await;
    assert_eq!(text_of(&r.response), "logged");
    r
}

#[tokio::test]
async fn backend_logs_reach_the_calling_session_at_its_level() {
    let gw = TestGateway::start(
        r#"
        [backends.lg]
        type = "stdio"
        command = "${FAKE_STDIO}"
        mode = "per_session"
        [backends.shared]
        type = "stdio"
        command = "${FAKE_STDIO}"
        mode = "shared"
        "#,
    )
    .await;
    let s = gw.session().await;
    let other = gw.session().await;
    let mut other_listen = other.get_stream().await;

    let r = log(&s, "lg__log", "info").await;
    let l = logs(&r);
    assert_eq!(l.len(), 1, "{:?}", r.related);
    assert_eq!(l[0]["params"]["data"], "at info");
    assert_eq!(l[0]["params"]["level"], "info");
    assert!(
        l[0]["params"]["logger"].as_str().unwrap().starts_with("lg"),
        "names the backend: {}",
        l[0]
    );
    // On a shared connection the log of the only call in flight is that call's:
    // it never reaches another session.
    let r = log(&s, "shared__log", "warning").await;
    assert_eq!(logs(&r).len(), 1, "{:?}", r.related);
    assert!(
        other_listen
            .next(std::time::Duration::from_millis(300))
            .await
            .is_none(),
        "another session sees nothing"
    );

    let set = s
        .request("logging/setLevel", json!({"level": "error"}))
        .await;
    assert!(set.response.get("result").is_some(), "{}", set.response);
    assert!(
        logs(&log(&s, "lg__log", "info").await).is_empty(),
        "below the level"
    );
    assert_eq!(logs(&log(&s, "lg__log", "error").await).len(), 1);
    let r = s
        .request("logging/setLevel", json!({"level": "loud"}))
        .await;
    assert_eq!(r.error_code(), Some(-32602));
}

#[tokio::test]
async fn a_background_log_of_a_shared_backend_reaches_no_session() {
    let dir = TestDir::new();
    std::fs::write(
        dir.path("later.json"),
        r#"[{"name":"log_later","inputSchema":{"type":"object"}}]"#,
    )
    .unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/later.json"]
        mode = "shared"
        "#,
    )
    .await;
    let a = gw.session().await;
    let b = gw.session().await;
    let mut a_listen = a.get_stream().await;
    let mut b_listen = b.get_stream().await;
    let r = a
        .call_tool(
            "fx__log_later",
            json!({"delay_ms": 200, "text": "secret of A"}),
        )
        .await;
    assert_eq!(text_of(&r.response), "later");
    // No call is in flight when A's background log arrives: nobody can be told.
    for listen in [&mut a_listen, &mut b_listen] {
        assert!(
            listen
                .next(std::time::Duration::from_millis(500))
                .await
                .is_none(),
            "a log no call was in flight for reached a session"
        );
    }
    let r = b
        .call_tool("fx__delay_echo", json!({"ms": 100, "tag": "b"}))
        .await;
    assert!(logs(&r).is_empty(), "{:?}", r.related);
}
