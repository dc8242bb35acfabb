//! Session lifecycle: an unknown session id is 404 so the host re-initializes; an
//! upstream session that a backend drops is re-established instead of leaving the
//! host session partly dead; DELETE reaches the backends, so no upstream session
//! leaks.

mod common;

use std::time::Duration;

use common::{FX, FX_LOGGED, FakeHttp, TestGateway, gone, logged_calls, text_of, wait_for};
use reqwest::Method;
use reqwest::header::HeaderValue;
use serde_json::json;

#[tokio::test]
async fn unknown_session_is_404_everywhere_and_a_fresh_initialize_works() {
    let gw = TestGateway::start(FX).await;
    let mut stale = gw.client();
    stale.session = Some("no-such-session".into());
    stale.version = Some("2025-11-25".into());
    let r = stale
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 404);
    assert!(r.json().get("error").is_some());
    let mut h = stale.headers();
    h.insert("accept", HeaderValue::from_static("text/event-stream"));
    h.remove("content-type");
    assert_eq!(stale.send_raw(Method::GET, h, "".into()).await.status, 404);
    assert_eq!(stale.delete().await.status, 404);

    let a = gw.session().await;
    let b = gw.session().await;
    let (ia, ib) = (a.session.clone().unwrap(), b.session.clone().unwrap());
    assert_ne!(ia, ib);
    for id in [&ia, &ib] {
        assert!(id.len() >= 16, "high entropy: {id}");
        assert!(id.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{id}");
    }
    assert_eq!(
        text_of(&a.call_tool("fx__echo", json!({"text": "a"})).await.response),
        "a"
    );
}

#[tokio::test]
async fn a_backend_dropping_its_session_is_recovered_and_others_are_unaffected() {
    let a = FakeHttp::default_started().await;
    let b = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        "[backends.a]\ntype = \"http\"\nurl = \"{}\"\n[backends.b]\ntype = \"http\"\nurl = \"{}\"\n",
        a.url, b.url
    ))
    .await;
    let s = gw.session().await;
    assert_eq!(
        text_of(&s.call_tool("a__echo", json!({"text": "1"})).await.response),
        "1"
    );
    assert_eq!(
        text_of(&s.call_tool("b__echo", json!({"text": "2"})).await.response),
        "2"
    );
    let first_sid = a.calls("tools/call")[0]
        .header("mcp-session-id")
        .unwrap()
        .to_owned();
    let b_inits = b.calls("initialize").len();

    a.drop_sessions();
    let r = s.call_tool("a__echo", json!({"text": "3"})).await;
    assert_eq!(text_of(&r.response), "3", "{}", r.response);
    let calls = a.calls("tools/call");
    let last = calls.last().unwrap();
    assert_eq!(last.status, 200);
    assert_ne!(
        last.header("mcp-session-id"),
        Some(first_sid.as_str()),
        "new upstream session"
    );
    let tools = s.list_all("tools/list", "tools").await;
    assert!(tools.iter().any(|t| t["name"] == "a__echo"));
    assert_eq!(
        text_of(&s.call_tool("b__echo", json!({"text": "4"})).await.response),
        "4"
    );
    assert_eq!(b.calls("initialize").len(), b_inits, "b untouched");
}

#[tokio::test]
async fn delete_ends_upstream_sessions_and_per_session_children() {
    let a = FakeHttp::default_started().await;
    let b = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [backends.a]
        type = "http"
        url = "{}"
        [backends.b]
        type = "http"
        url = "{}"
        [backends.c]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        args = ["--log", "${{TEST_DIR}}/c.log"]
        mode = "per_session"
        "#,
        a.url, b.url
    ))
    .await;
    let s = gw.session().await;
    for name in ["a__echo", "b__echo", "c__echo"] {
        let r = s.call_tool(name, json!({"text": name})).await;
        assert_eq!(text_of(&r.response), name);
    }
    let c_log = gw.dir.path("c.log");
    let child = logged_calls(&c_log, "echo")[0]["pid"].as_u64().unwrap() as u32;
    let upstream_a = a.calls("tools/call")[0]
        .header("mcp-session-id")
        .unwrap()
        .to_owned();
    let upstream_b = b.calls("tools/call")[0]
        .header("mcp-session-id")
        .unwrap()
        .to_owned();

    let r = s.delete().await;
    assert!(r.status.is_success(), "DELETE: {r:?}");
    let r = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 404, "ended session");
    let deleted = |fx: &FakeHttp, sid: &str| {
        fx.log()
            .iter()
            .any(|r| r.http_method == "DELETE" && r.header("mcp-session-id") == Some(sid))
    };
    assert!(wait_for(Duration::from_secs(3), || deleted(&a, &upstream_a)).await);
    assert!(wait_for(Duration::from_secs(3), || deleted(&b, &upstream_b)).await);
    assert!(
        wait_for(Duration::from_secs(5), || gone(child)).await,
        "per-session child {child} exited and was reaped"
    );

    let mut no_id = gw.client().headers();
    no_id.remove("content-type");
    let r = s.send_raw(Method::DELETE, no_id, "".into()).await;
    assert_eq!(r.status, 400, "DELETE without a session id");
}

#[tokio::test]
async fn idle_sessions_expire_with_their_children_even_with_a_stream_open() {
    let gw = TestGateway::start(
        r#"
        [server]
        session_idle_timeout = "300ms"
        [backends.c]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/c.log"]
        mode = "per_session"
        "#,
    )
    .await;
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    assert_eq!(
        text_of(&s.call_tool("c__echo", json!({"text": "x"})).await.response),
        "x"
    );
    let child = logged_calls(&gw.dir.path("c.log"), "echo")[0]["pid"]
        .as_u64()
        .unwrap() as u32;
    assert!(
        listen.ends_within(Duration::from_secs(4)).await,
        "the GET stream ends when the idle session expires"
    );
    assert!(
        wait_for(Duration::from_secs(4), || gone(child)).await,
        "child {child} stopped"
    );
    let r = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn max_sessions_caps_initialize_with_503() {
    let gw = TestGateway::start(&format!("[server]\nmax_sessions = 2\n{FX}")).await;
    let a = gw.session().await;
    let _b = gw.session().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
    let r = gw.client().post(&[], body.to_string()).await;
    assert_eq!(r.status, 503);
    assert!(r.header("mcp-session-id").is_none());
    // RFC 9110 §10.2.3: a 503 may say when to come back; hosts and load
    // balancers back off by it instead of retrying at once.
    let retry = r.header("retry-after").map(str::parse::<u64>);
    assert!(
        matches!(retry, Some(Ok(1..=60))),
        "Retry-After in whole seconds within a minute: {:?}",
        r.header("retry-after")
    );
    assert_eq!(r.json()["error"]["code"], -32000, "{:?}", r.body);
    assert!(a.delete().await.status.is_success());
    let _c = gw.session().await;
}

#[tokio::test]
async fn delete_cancels_calls_in_flight_upstream() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "fx__slow_task", "arguments": {"s": 30}}});
    let mut stream = s.open(&call).await;
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "slow_task")
            .is_empty())
        .await
    );
    let upstream = logged_calls(&log, "slow_task")[0]["msg"]["id"].clone();
    assert!(s.delete().await.status.is_success());
    let cancelled = || {
        common::logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(wait_for(Duration::from_secs(2), cancelled).await);
    // The pending id is answered first (cancellation.rs has the details).
    let answer = stream.next(Duration::from_secs(2)).await;
    assert_eq!(
        answer.as_ref().map(|a| &a["id"]),
        Some(&json!(3)),
        "{answer:?}"
    );
    assert!(
        stream.ends_within(Duration::from_secs(2)).await,
        "POST stream ends"
    );
}
