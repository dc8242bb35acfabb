//! The client face's era per backend (`era = "auto" | "legacy" | "modern"`):
//! a 2026-07-28 HTTP backend (another mcpgate, whose host face is dual-era) is
//! spoken to statelessly — no `initialize`, no session, `_meta` and the standard
//! headers on every request — for legacy and modern hosts alike; the `auto`
//! probe's verdicts over HTTP (legacy 400, garbage, -32022 with legacy versions,
//! a hanging discover, 401) and over stdio (a legacy child that exits on the
//! probe, one that ignores it).

mod common;

use std::time::Duration;

use common::{Discover, FakeHttp, FakeHttpOptions, TestGateway, read_log, text_of};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

/// A gateway over the fake stdio backend: a real 2026-07-28 HTTP server.
async fn modern_backend() -> TestGateway {
    TestGateway::start(
        "[server]\nmetrics_listen = \"127.0.0.1:0\"\n[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n",
    )
    .await
}

/// A gateway in front of `url`, spoken to in `era`.
async fn front(url: &str, era: &str) -> TestGateway {
    TestGateway::start(&format!(
        "[backends.up]\ntype = \"http\"\nurl = \"{url}\"\nera = \"{era}\"\ntimeout = \"2s\"\n"
    ))
    .await
}

/// How many host requests of `method` the backend gateway counted.
async fn served(backend: &TestGateway, method: &str) -> f64 {
    let text = common::scrape(backend).await;
    text.lines()
        .filter(|l| l.starts_with("mcpgate_requests_total{"))
        .filter(|l| l.contains(&format!("method=\"{method}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_legacy_host_lists_calls_reads_and_gets_prompts_from_a_modern_backend() {
    let up = modern_backend().await;
    for era in ["auto", "modern"] {
        let gw = front(&up.url, era).await;
        let s = gw.session().await;
        let tools = common::names(&s.list_all("tools/list", "tools").await);
        assert!(
            tools.contains(&"up__fx__echo".to_owned()),
            "{era}: {tools:?}"
        );
        let r = s.call_tool("up__fx__echo", json!({"text": "hi"})).await;
        assert_eq!(text_of(&r.response), "hi", "{era}: {r:?}");
        let result = &r.response["result"];
        for k in ["resultType", "ttlMs", "cacheScope"] {
            assert!(
                result.get(k).is_none(),
                "{era}: {k} reached a legacy host: {result}"
            );
        }
        let uris: Vec<Value> = s.list_all("resources/list", "resources").await;
        assert!(
            uris.iter().any(|u| u["uri"] == "up+fx+fx://static"),
            "{era}: {uris:?}"
        );
        let read = s
            .request("resources/read", json!({"uri": "up+fx+fx://static"}))
            .await;
        let contents = &read.result()["contents"];
        assert!(contents[0]["text"].is_string(), "{era}: {read:?}");
        assert!(read.result().get("resultType").is_none(), "{read:?}");
        let prompt = s
            .request(
                "prompts/get",
                json!({"name": "up__fx__greet", "arguments": {"name": "Ada"}}),
            )
            .await;
        let messages = prompt.result()["messages"].as_array().cloned();
        assert!(messages.is_some_and(|m| !m.is_empty()), "{era}: {prompt:?}");
    }
    // Everything reached the backend as stateless requests: no handshake, no
    // session, only server/discover in its place.
    assert_eq!(served(&up, "initialize").await, 0.0);
    assert!(served(&up, "server/discover").await >= 2.0);
    assert!(served(&up, "tools/call").await >= 2.0);
    assert!(served(&up, "resources/read").await >= 2.0);
    assert!(served(&up, "prompts/get").await >= 2.0);
}

#[tokio::test]
async fn a_modern_host_is_relayed_to_a_modern_backend() {
    let up = modern_backend().await;
    let gw = front(&up.url, "auto").await;
    let c = gw.client();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "up__fx__echo", "arguments": {"text": "m"}, "_meta": meta}});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "up__fx__echo"),
    ];
    let r = c.post(&h, body.to_string()).await;
    let v = r.json();
    assert_eq!(v["result"]["content"][0]["text"], "m", "{v}");
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert_eq!(served(&up, "initialize").await, 0.0);
    assert!(served(&up, "tools/call").await >= 1.0);
}

#[tokio::test]
async fn auto_falls_back_to_initialize_on_every_legacy_answer() {
    for discover in [
        None,
        Some(Discover::Garbage),
        Some(Discover::LegacyVersions),
    ] {
        let fx = FakeHttp::start(FakeHttpOptions {
            discover,
            ..FakeHttpOptions::default()
        })
        .await;
        let gw = front(&fx.url, "auto").await;
        let s = gw.session().await;
        let r = s.call_tool("up__echo", json!({"text": "l"})).await;
        assert_eq!(text_of(&r.response), "l", "{discover:?}: {r:?}");
        let probes = fx.calls("server/discover");
        assert!(!probes.is_empty(), "{discover:?}: probed first");
        let probe = &probes[0];
        assert_eq!(probe.header("mcp-protocol-version"), Some(MODERN));
        assert_eq!(probe.header("mcp-method"), Some("server/discover"));
        assert!(probe.header("mcp-session-id").is_none());
        let meta = &probe.body.as_ref().unwrap()["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], MODERN);
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            "mcpgate"
        );
        assert!(!fx.calls("initialize").is_empty(), "{discover:?}");
        // The verdict is cached: a second session's connection does not probe.
        let before = fx.calls("server/discover").len();
        let s2 = gw.session().await;
        let r = s2.call_tool("up__echo", json!({"text": "2"})).await;
        assert_eq!(text_of(&r.response), "2");
        assert_eq!(fx.calls("server/discover").len(), before, "{discover:?}");
    }
}

#[tokio::test]
async fn no_era_evidence_leaves_the_backend_unavailable_not_legacy() {
    for discover in [Discover::Hang, Discover::Unauthorized] {
        let fx = FakeHttp::start(FakeHttpOptions {
            discover: Some(discover),
            ..FakeHttpOptions::default()
        })
        .await;
        let started = tokio::time::Instant::now();
        let gw = front(&fx.url, "auto").await;
        let s = gw.session().await;
        let r = s.call_tool("up__echo", json!({"text": "x"})).await;
        assert!(r.response.get("error").is_some(), "{discover:?}: {r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{discover:?}: the probe is bounded ({:?})",
            started.elapsed()
        );
        assert!(!fx.calls("server/discover").is_empty(), "{discover:?}");
        assert!(
            fx.calls("initialize").is_empty(),
            "{discover:?}: a timeout or 401 is no reason to speak legacy"
        );
    }
}

#[tokio::test]
async fn a_stdio_child_that_exits_on_the_probe_is_replaced_and_initialized() {
    let gw = TestGateway::start(
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--exit-before-init", "--log", "${TEST_DIR}/fx.log"]
        "#,
    )
    .await;
    let s = gw.session().await;
    let r = s.call_tool("fx__echo", json!({"text": "back"})).await;
    assert_eq!(text_of(&r.response), "back", "{r:?}");
    let log = read_log(&gw.dir.path("fx.log"));
    let exits = log
        .iter()
        .filter(|e| e["event"] == "exit before initialize")
        .count();
    assert_eq!(exits, 1, "probed once, then cached as legacy: {log:?}");
}

#[tokio::test]
async fn a_stdio_child_that_ignores_the_probe_is_initialized_in_place() {
    let gw = TestGateway::start(
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--strict-init", "--log", "${TEST_DIR}/fx.log"]
        "#,
    )
    .await;
    let s = gw.session().await;
    // The probe waits out its timeout before `initialize` follows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !common::names(&s.list_all("tools/list", "tools").await).contains(&"fx__echo".to_owned())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the catalogue never loaded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = s.call_tool("fx__echo", json!({"text": "late"})).await;
    assert_eq!(text_of(&r.response), "late", "{r:?}");
    let log = read_log(&gw.dir.path("fx.log"));
    let started = log.iter().filter(|e| e["event"] == "started").count();
    assert_eq!(started, 1, "the same child: {log:?}");
    assert!(
        log.iter()
            .any(|e| e["event"] == "ignored before initialized" && e["method"] == "server/discover"),
        "{log:?}"
    );
}

/// A gateway over the fake stdio backend with `args`, as a 2026-07-28 HTTP server.
async fn modern_backend_with(args: &str) -> TestGateway {
    TestGateway::start(&format!(
        "[backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [{args}]\n"
    ))
    .await
}

/// Messages on `stream` up to and including the response (at most 10 s).
async fn until_response(stream: &mut common::SseStream) -> Vec<Value> {
    let mut got = Vec::new();
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        let done = m.get("id").is_some() && m.get("method").is_none();
        got.push(m);
        if done {
            break;
        }
    }
    got
}

#[tokio::test]
async fn progress_and_logs_of_a_modern_backend_reach_the_legacy_host() {
    let up = modern_backend().await;
    let gw = front(&up.url, "auto").await;
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "up__fx__slow_progress", "arguments": {"n": 3, "interval_ms": 50},
        "_meta": {"progressToken": "p"}}});
    let mut stream = s.open(&call).await;
    let got = until_response(&mut stream).await;
    let progress: Vec<&Value> = got
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "{got:?}");
    assert!(
        progress.iter().all(|p| p["params"]["progressToken"] == "p"),
        "{got:?}"
    );
    assert_eq!(got.last().unwrap()["id"], 5, "{got:?}");
    // The session's level travels as the request's logLevel: no level, no logs.
    let log = |id: i64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "up__fx__log", "arguments": {"level": "warning", "text": text}}})
    };
    let mut quiet = s.open(&log(6, "unasked")).await;
    let got = until_response(&mut quiet).await;
    assert!(
        got.iter().all(|m| m["method"] != "notifications/message"),
        "{got:?}"
    );
    let set = s
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(set.response.get("result").is_some(), "{set:?}");
    let mut loud = s.open(&log(7, "asked")).await;
    let got = until_response(&mut loud).await;
    assert!(
        got.iter()
            .any(|m| m["method"] == "notifications/message" && m["params"]["data"] == "asked"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_legacy_host_cancel_closes_the_stateless_request_and_reaches_the_backend() {
    let up = modern_backend_with("\"--log\", \"${TEST_DIR}/fx.log\", \"--never-answer\", \"echo\"")
        .await;
    let gw = front(&up.url, "auto").await;
    let s = gw.session().await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "up__fx__echo", "arguments": {"text": "never"}}});
    let stream = s.open(&call).await;
    let log = up.dir.path("fx.log");
    assert!(
        common::wait_for(Duration::from_secs(5), || !common::logged_calls(
            &log, "echo"
        )
        .is_empty())
        .await
    );
    let upstream = common::logged_calls(&log, "echo")[0]["msg"]["id"].clone();
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": 9, "reason": "user"})),
    )
    .await;
    let cancelled = || {
        common::logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(
        common::wait_for(Duration::from_secs(5), cancelled).await,
        "the dropped stream cancels upstream of the modern backend: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    drop(stream);
}

#[tokio::test]
async fn a_cached_modern_era_is_probed_again_when_the_backend_answers_as_legacy() {
    let up = TestGateway::start(
        "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\nprefix = \"\"\n",
    )
    .await;
    let addr = up.addr.to_string();
    let gw = front(&up.url, "auto").await;
    let s = gw.session().await;
    let r = s.call_tool("up__echo", json!({"text": "modern"})).await;
    assert_eq!(text_of(&r.response), "modern", "{r:?}");
    // The same origin now serves a legacy-only server.
    up.shutdown().await;
    let fx = FakeHttp::start_at(FakeHttpOptions::default(), &addr).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = s.call_tool("up__echo", json!({"text": "legacy"})).await;
        if r.response["result"]["content"][0]["text"] == "legacy" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never re-probed: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let methods: Vec<Option<String>> = fx
        .log()
        .iter()
        .map(|r| r.rpc_method().map(str::to_owned))
        .collect();
    let discover = methods
        .iter()
        .position(|m| m.as_deref() == Some("server/discover"));
    let init = methods
        .iter()
        .position(|m| m.as_deref() == Some("initialize"));
    assert!(
        matches!((discover, init), (Some(d), Some(i)) if d < i),
        "probed again, then initialized: {methods:?}"
    );
}

#[tokio::test]
async fn completion_works_through_a_modern_backend() {
    let up = TestGateway::start(&format!(
        "[backends.demo]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"demo-server\"]\nprefix = \"\"\n",
        env!("CARGO_BIN_EXE_mcpgate")
    ))
    .await;
    let gw = front(&up.url, "auto").await;
    let s = gw.session().await;
    let r = s
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "up__test_prompt_with_arguments"},
                   "argument": {"name": "arg1", "value": "pa"}}),
        )
        .await;
    let values = &r.result()["completion"]["values"];
    assert_eq!(values, &json!(["paris", "park", "party"]), "{r:?}");
    assert!(r.result().get("resultType").is_none(), "{r:?}");
}
