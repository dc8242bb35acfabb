//! A backend's `notifications/tools/list_changed` reaches the host once, on its
//! GET stream, and the next `tools/list` has the new tool; a backend that
//! announces after every list (a notification storm) is not re-listed in a loop
//! and announces nothing while its lists stay the same; a backend restarted with
//! a different catalogue and no notification is re-read after the restart; a
//! per-session stdio child's own change reaches only its session.

mod common;

use std::time::Duration;

use common::{FakeHttp, TestGateway, logged, names, text_of};
use serde_json::{Value, json};

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
    assert_tools_list_changed(&first);
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
    assert_tools_list_changed(&first);
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
    assert_tools_list_changed(&note);
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"web__fresh".to_owned()), "{tools:?}");
}

/// Milliseconds since the epoch of every `tools/list` a fake-stdio log shows.
fn list_times(log: &std::path::Path) -> Vec<u64> {
    logged(log, "tools/list")
        .iter()
        .filter_map(|e| e.get("ts").and_then(Value::as_u64))
        .collect()
}

#[tokio::test]
async fn a_backend_announcing_after_every_list_is_not_relisted_in_a_loop() {
    let gw = TestGateway::start(
        r#"
        [backends.storm]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--storm", "--log", "${TEST_DIR}/storm.log"]
        "#,
    )
    .await;
    let log = gw.dir.path("storm.log");
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let times = list_times(&log);
    // Unpaced, every list answered by a notification is re-listed ~50 ms later
    // (over 100 lists in 6 s, forever).
    assert!(times.len() <= 6, "{} lists in 6 s: {times:?}", times.len());
    let late = times.iter().filter(|t| **t > start + 3000).count();
    assert!(late <= 1, "the storm settles: {late} lists in the last 3 s");
    while let Some(m) = listen.next(Duration::from_millis(300)).await {
        assert_ne!(
            m["method"], "notifications/tools/list_changed",
            "nothing changed, so nothing is announced"
        );
    }
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"storm__echo".to_owned()), "{tools:?}");
    // A real change is still picked up (within the backed-off period).
    let r = s
        .call_tool("storm__add_tool", json!({"name": "fresh"}))
        .await;
    assert_eq!(text_of(&r.response), "added fresh");
    let note = listen.next(Duration::from_secs(20)).await;
    assert_tools_list_changed(&note);
    let tools = names(&s.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"storm__fresh".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn a_backend_restarted_with_another_catalogue_is_reread() {
    let dir = common::TestDir::new();
    let tools = dir.path("tools.json");
    let tool = |name: &str| json!([{"name": name, "inputSchema": {"type": "object"}}]);
    std::fs::write(&tools, tool("before").to_string()).unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/tools.json", "--exit-after-calls", "0"]
        "#,
    )
    .await;
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    let listed = names(&s.list_all("tools/list", "tools").await);
    assert!(listed.contains(&"fx__before".to_owned()), "{listed:?}");
    // The next child serves another catalogue; this one dies on the next call
    // and says nothing about lists.
    std::fs::write(&tools, tool("after").to_string()).unwrap();
    let r = s.call_tool("fx__echo", json!({"text": "x"})).await;
    assert!(r.response.get("error").is_some(), "{}", r.response);
    let note = listen.next(Duration::from_secs(10)).await;
    assert_tools_list_changed(&note);
    let listed = names(&s.list_all("tools/list", "tools").await);
    assert!(listed.contains(&"fx__after".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"fx__before".to_owned()), "{listed:?}");
}

/// A per-session backend's own list change (its child, serving one session,
/// adds a tool) concerns that session only: it gets `list_changed` on its GET
/// stream and sees and can call the new tool; another session sees neither.
/// (The backend's catalogue, fetched on its catalogue connection, does not
/// have the tool: the session's view has its own connection's lists.)
#[tokio::test]
async fn a_per_session_backends_own_list_change_reaches_only_its_session() {
    let gw = TestGateway::start(
        r#"
        [backends.ps]
        type = "stdio"
        command = "${FAKE_STDIO}"
        mode = "per_session"
        "#,
    )
    .await;
    let a = gw.session().await;
    let b = gw.session().await;
    let mut listen_a = a.get_stream().await;
    let mut listen_b = b.get_stream().await;
    let r = a.call_tool("ps__add_tool", json!({"name": "mine"})).await;
    assert_eq!(text_of(&r.response), "added mine");
    let note = listen_a.next(Duration::from_secs(5)).await;
    assert_tools_list_changed(&note);
    let tools = names(&a.list_all("tools/list", "tools").await);
    assert!(tools.contains(&"ps__mine".to_owned()), "{tools:?}");
    let r = a.call_tool("ps__mine", json!({})).await;
    assert_eq!(text_of(&r.response), "called mine");
    let other = listen_b.next(Duration::from_millis(500)).await;
    assert!(other.is_none(), "not another session's: {other:?}");
    let tools = names(&b.list_all("tools/list", "tools").await);
    assert!(!tools.contains(&"ps__mine".to_owned()), "{tools:?}");
}

/// The same with the demo backend of the default configuration (dual-era, so
/// a 2026-07-28 backend by default: its changes come on the `subscriptions/listen`
/// its connection keeps): `test_trigger_tool_change` adds `test_dynamic_tool`
/// for the calling session.
#[tokio::test]
async fn the_demo_backends_tool_change_reaches_its_session() {
    let gw = TestGateway::start(&format!(
        "[backends.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-server\"]\nmode = \"per_session\"\n",
        env!("CARGO_BIN_EXE_mcpgate")
    ))
    .await;
    let a = gw.session().await;
    let b = gw.session().await;
    let mut listen_a = a.get_stream().await;
    let mut listen_b = b.get_stream().await;
    let r = a
        .call_tool("demo__test_trigger_tool_change", json!({}))
        .await;
    assert_eq!(text_of(&r.response), "test_dynamic_tool present: true");
    let note = listen_a.next(Duration::from_secs(5)).await;
    assert_tools_list_changed(&note);
    let tools = names(&a.list_all("tools/list", "tools").await);
    assert!(
        tools.contains(&"demo__test_dynamic_tool".to_owned()),
        "{tools:?}"
    );
    let r = a.call_tool("demo__test_dynamic_tool", json!({})).await;
    assert_eq!(text_of(&r.response), "dynamic");
    let other = listen_b.next(Duration::from_millis(500)).await;
    assert!(other.is_none(), "not another session's: {other:?}");
    let tools = names(&b.list_all("tools/list", "tools").await);
    assert!(
        !tools.contains(&"demo__test_dynamic_tool".to_owned()),
        "{tools:?}"
    );
    // Triggered again, the tool goes: the session is told and sees what all see.
    let r = a
        .call_tool("demo__test_trigger_tool_change", json!({}))
        .await;
    assert_eq!(text_of(&r.response), "test_dynamic_tool present: false");
    let note = listen_a.next(Duration::from_secs(5)).await;
    assert_tools_list_changed(&note);
    let tools = names(&a.list_all("tools/list", "tools").await);
    assert!(
        !tools.contains(&"demo__test_dynamic_tool".to_owned()),
        "{tools:?}"
    );
    let r = a.call_tool("demo__test_dynamic_tool", json!({})).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.response);
}

/// `note` is a `notifications/tools/list_changed`.
fn assert_tools_list_changed(note: &Option<Value>) {
    assert_eq!(
        note.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "{note:?}"
    );
}
