//! A backend's `notifications/tools/list_changed` reaches the host once, on its GET
//! stream, and the next `tools/list` has the new tool.

mod common;

use std::time::Duration;

use common::{FakeHttp, TestGateway, names, text_of};
use serde_json::json;

#[tokio::test]
async fn list_changed_reaches_the_host_once_and_the_list_is_refreshed() {
    let other = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [backends.dyn]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        [backends.other]
        type = "http"
        url = "{}"
        "#,
        other.url
    ))
    .await;
    let mut s = gw.client();
    let init = s.initialize(json!({})).await;
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let mut listen = s.get_stream().await;
    let before = names(&s.list_all("tools/list", "tools").await);
    assert!(!before.contains(&"dyn__extra".to_owned()));
    let other_inits = other.calls("initialize").len();

    let r = s.call_tool("dyn__add_tool", json!({"name": "extra"})).await;
    assert_eq!(text_of(&r.response), "added extra");
    assert!(
        r.related
            .iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "not on the POST stream as well: {:?}",
        r.related
    );
    let first = listen.next(Duration::from_secs(5)).await;
    assert_eq!(
        first.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "{first:?}"
    );
    let again = listen.next(Duration::from_millis(500)).await;
    assert!(
        again
            .as_ref()
            .is_none_or(|m| m["method"] != "notifications/tools/list_changed"),
        "exactly once: {again:?}"
    );
    let after = names(&s.list_all("tools/list", "tools").await);
    assert!(after.contains(&"dyn__extra".to_owned()), "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    let r = s.call_tool("dyn__extra", json!({})).await;
    assert_eq!(text_of(&r.response), "called extra");
    assert_eq!(
        other.calls("initialize").len(),
        other_inits,
        "other backend untouched"
    );
}

#[tokio::test]
async fn list_changed_on_an_http_backends_get_stream_is_relayed() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        "[backends.web]\ntype = \"http\"\nurl = \"{}\"\n",
        fx.url
    ))
    .await;
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    let opened = || {
        fx.log()
            .iter()
            .any(|r| r.http_method == "GET" && r.status == 200)
    };
    assert!(common::wait_for(Duration::from_secs(3), opened).await);
    assert!(fx.add_tool_and_announce("late") >= 1);
    let first = listen.next(Duration::from_secs(5)).await;
    assert_eq!(
        first.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "{first:?}"
    );
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"web__late".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn add_tool_on_a_per_session_http_backend_refreshes_the_catalogue() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        "[backends.web]\ntype = \"http\"\nurl = \"{}\"\n",
        fx.url
    ))
    .await;
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    let r = s.call_tool("web__add_tool", json!({"name": "fresh"})).await;
    assert_eq!(text_of(&r.response), "added fresh");
    let note = listen.next(Duration::from_secs(5)).await;
    assert_eq!(
        note.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "{note:?}"
    );
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"web__fresh".to_owned()), "{tools:?}");
}
