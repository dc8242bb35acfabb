//! Protocol versions and protocol headers: each backend gets the version negotiated
//! with it, not the host's copied over; configured headers never replace protocol
//! headers (such as `Accept`) upstream; downstream version header validation.

mod common;

use std::time::Duration;

use common::{FakeHttp, FakeHttpOptions, TestGateway, text_of, wait_for};
use serde_json::json;

#[tokio::test]
async fn each_backend_gets_the_version_negotiated_with_it() {
    let old = FakeHttp::start(FakeHttpOptions {
        versions: vec!["2025-06-18".into()],
        strict_version_header: true,
        ..FakeHttpOptions::default()
    })
    .await;
    let new = FakeHttp::start(FakeHttpOptions {
        versions: vec!["2025-11-25".into(), "2025-06-18".into()],
        strict_version_header: true,
        ..FakeHttpOptions::default()
    })
    .await;
    let gw = TestGateway::start(&format!(
        "[backends.old]\ntype = \"http\"\nurl = \"{}\"\n[backends.new]\ntype = \"http\"\nurl = \"{}\"\n",
        old.url, new.url
    ))
    .await;
    let s = gw.session().await;
    assert_eq!(
        text_of(
            &s.call_tool("old__echo", json!({"text": "o"}))
                .await
                .response
        ),
        "o"
    );
    assert_eq!(
        text_of(
            &s.call_tool("new__echo", json!({"text": "n"}))
                .await
                .response
        ),
        "n"
    );
    for (fx, want) in [(&old, "2025-06-18"), (&new, "2025-11-25")] {
        for r in fx.log() {
            // The era probe speaks 2026-07-28 (refused: a legacy backend).
            if matches!(r.rpc_method(), Some("initialize" | "server/discover")) {
                continue;
            }
            assert_eq!(r.header("mcp-protocol-version"), Some(want), "{r:?}");
            assert_eq!(r.status / 100, 2, "{r:?}");
        }
    }
}

#[tokio::test]
async fn downstream_version_header_is_validated_and_unknown_versions_get_the_latest() {
    let gw = TestGateway::start("").await;
    let s = gw.session().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for bad in ["2099-01-01", "banana"] {
        let r = s.post(&[("mcp-protocol-version", bad)], ping.clone()).await;
        assert_eq!(r.status, 400, "{bad}");
    }
    // Two served revisions that disagree: 400, saying so (it said "unsupported
    // MCP-Protocol-Version \"2025-06-18\"", a revision the gateway serves).
    let mut h = s.headers();
    h.append("mcp-protocol-version", "2025-06-18".parse().unwrap());
    let r = s
        .send_raw(reqwest::Method::POST, h, ping.clone().into())
        .await;
    assert_eq!(r.status, 400);
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("more than once"), "{text}");
    let r = s.post(&[("mcp-protocol-version", "")], ping).await;
    assert_eq!(r.status, 200, "absent header: negotiated version applies");

    let mut c = gw.client();
    let v = c.initialize_version("2030-01-01", json!({})).await;
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
}

/// MCP 2025-11-25 transports: 400 only for an invalid or unsupported
/// `MCP-Protocol-Version`. A revision the gateway serves but the session did not
/// negotiate is neither: the request is served at the session's revision (the
/// official conformance suite 0.1.16 sends `2025-03-26` on its 2025-11-25
/// sessions in server-sse-polling and server-sse-multiple-streams and expects
/// 200; the TypeScript SDK's server checks the header against its supported list
/// only).
#[tokio::test]
async fn a_served_revision_other_than_the_sessions_is_answered_at_the_sessions() {
    let gw = TestGateway::start("").await;
    let s = gw.session().await;
    assert_eq!(s.version.as_deref(), Some("2025-11-25"));
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for other in ["2025-03-26", "2025-06-18"] {
        let h = [("mcp-protocol-version", other)];
        assert_eq!(s.post(&h, ping.clone()).await.status, 200, "POST {other}");
        assert_eq!(s.get_stream_with(&h).await.status, 200, "GET {other}");
    }
    let h = [("mcp-protocol-version", "2024-11-05")];
    assert_eq!(s.post(&h, ping).await.status, 400, "not served: 400");
}

/// `MCP-Protocol-Version` on `initialize` (MCP 2025-11-25 transports: the
/// header is what a client sends after initialization; an invalid value is
/// 400). A value that is no revision at all is 400 there too; a well-formed
/// revision the gateway does not serve is left to the negotiation in the body
/// (as the TypeScript and Python SDK servers do: they check it only after
/// `initialize`), so a newer client still falls back.
#[tokio::test]
async fn the_version_header_on_initialize_is_refused_only_when_it_is_no_revision() {
    let gw = TestGateway::start("").await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string();
    let c = gw.client();
    for bad in ["banana", "2025-06-18x", "latest"] {
        let r = c.post(&[("mcp-protocol-version", bad)], init.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert_eq!(r.json()["error"]["code"], -32000, "{bad}");
        assert!(r.header("mcp-session-id").is_none(), "{bad}");
    }
    assert_eq!(gw.gateway().session_count(), 0);
    for fine in ["2025-06-18", "2099-01-01", "2024-11-05"] {
        let r = c
            .post(&[("mcp-protocol-version", fine)], init.clone())
            .await;
        assert_eq!(r.status, 200, "{fine}: {r:?}");
        assert_eq!(
            r.json()["result"]["protocolVersion"],
            "2025-06-18",
            "{fine}"
        );
    }
}

#[tokio::test]
async fn configured_headers_never_replace_protocol_headers() {
    // Protocol headers cannot even be configured (check-config refuses them).
    let refused = mcpgate::config::Config::parse(
        "[backends.b]\ntype = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = { Accept = \"text/plain\", \"Mcp-Session-Id\" = \"evil\" }\n",
        std::path::Path::new("x.toml"),
        &|_| None,
    )
    .unwrap_err();
    assert_eq!(refused.len(), 2, "{refused:?}");
    let fx = FakeHttp::start(FakeHttpOptions {
        strict_accept: true,
        ..FakeHttpOptions::default()
    })
    .await;
    let gw = TestGateway::start(&format!(
        r#"
        [backends.strict]
        type = "http"
        url = "{}"
        [backends.strict.headers]
        X-Api-Key = "k1"
        "#,
        fx.url
    ))
    .await;
    let s = gw.session().await;
    let r = s.call_tool("strict__echo", json!({"text": "hi"})).await;
    assert_eq!(text_of(&r.response), "hi", "{}", r.response);
    assert!(
        wait_for(Duration::from_secs(3), || fx
            .log()
            .iter()
            .any(|r| r.http_method == "GET"))
        .await,
        "the gateway opened its GET stream"
    );
    for r in fx.log() {
        assert_eq!(r.header("x-api-key"), Some("k1"), "{r:?}");
        assert_ne!(r.header("mcp-session-id"), Some("evil"), "{r:?}");
        assert_ne!(
            r.header("mcp-protocol-version"),
            Some("1999-01-01"),
            "{r:?}"
        );
        match r.http_method.as_str() {
            "POST" => {
                assert_eq!(
                    r.header("accept"),
                    Some("application/json, text/event-stream")
                );
                assert_eq!(r.header("content-type"), Some("application/json"));
            }
            "GET" => assert_eq!(r.header("accept"), Some("text/event-stream")),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_backend_without_a_get_stream_is_asked_once() {
    let fx = FakeHttp::start(FakeHttpOptions {
        get_sse: false,
        ..FakeHttpOptions::default()
    })
    .await;
    let gw = TestGateway::start(&format!(
        "[backends.web]\ntype = \"http\"\nurl = \"{}\"\nmode = \"shared\"\n",
        fx.url
    ))
    .await;
    let s = gw.session().await;
    assert_eq!(
        text_of(
            &s.call_tool("web__echo", json!({"text": "e"}))
                .await
                .response
        ),
        "e"
    );
    let gets = || fx.log().iter().filter(|r| r.http_method == "GET").count();
    assert!(wait_for(Duration::from_secs(3), || gets() >= 1).await);
    assert!(
        fx.log()
            .iter()
            .all(|r| r.http_method != "GET" || r.status == 405)
    );
    // 405 means "no such stream": no retry loop.
    assert!(
        !wait_for(Duration::from_millis(1500), || gets() > 1).await,
        "{} GETs",
        gets()
    );
}

/// Tools with every newer field, and a tool answering `structuredContent` and a
/// `resource_link`.
fn rich_tools(dir: &common::TestDir) {
    let tools = json!([
        {"name": "rich", "title": "Rich", "icons": [{"src": "https://x.example.test/i.png"}],
         "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"},
         "execution": {"taskSupport": "optional"}},
        {"name": "structured", "inputSchema": {"type": "object"},
         "outputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}}
    ]);
    std::fs::write(dir.path("tools.json"), tools.to_string()).unwrap();
}

#[tokio::test]
async fn older_hosts_never_see_what_their_revision_lacks() {
    let dir = common::TestDir::new();
    rich_tools(&dir);
    let gw = TestGateway::start_in(
        dir,
        r#"
        [server]
        metrics_listen = "off"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tasks", "--tools-json", "${TEST_DIR}/tools.json"]
        "#,
    )
    .await;
    let tool = |tools: &[serde_json::Value], name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {tools:?}"))
    };

    // 2025-11-25: everything.
    let mut new = gw.client();
    let init = new.initialize(json!({})).await;
    assert!(init["result"]["capabilities"].get("tasks").is_some());
    let rich = tool(&new.list_all("tools/list", "tools").await, "fx__rich");
    for field in ["title", "icons", "outputSchema", "execution"] {
        assert!(
            rich.get(field).is_some(),
            "2025-11-25 keeps {field}: {rich}"
        );
    }
    let r = new.call_tool("fx__structured", json!({})).await;
    assert_eq!(r.result()["structuredContent"], json!({"n": 1}));
    assert_eq!(r.result()["content"][1]["type"], "resource_link");

    // 2025-06-18: no icons, execution or tasks; title, outputSchema and
    // structuredContent stay.
    let mut mid = gw.client();
    let init = mid.initialize_version("2025-06-18", json!({})).await;
    assert!(
        init["result"]["capabilities"].get("tasks").is_none(),
        "{init}"
    );
    let rich = tool(&mid.list_all("tools/list", "tools").await, "fx__rich");
    for field in ["icons", "execution"] {
        assert!(
            rich.get(field).is_none(),
            "2025-06-18 gets no {field}: {rich}"
        );
    }
    for field in ["title", "outputSchema"] {
        assert!(
            rich.get(field).is_some(),
            "2025-06-18 keeps {field}: {rich}"
        );
    }
    let r = mid.call_tool("fx__structured", json!({})).await;
    assert_eq!(r.result()["structuredContent"], json!({"n": 1}));
    assert_eq!(r.result()["content"][1]["type"], "resource_link");

    // 2025-03-26: none of outputSchema, title, icons, execution; no
    // structuredContent, no resource_link blocks (the link becomes text naming
    // the URI, still routable).
    let mut old = gw.client();
    let init = old.initialize_version("2025-03-26", json!({})).await;
    assert!(
        init["result"]["capabilities"].get("tasks").is_none(),
        "{init}"
    );
    let tools = old.list_all("tools/list", "tools").await;
    for t in &tools {
        for field in ["title", "icons", "outputSchema", "execution"] {
            assert!(t.get(field).is_none(), "2025-03-26 gets no {field}: {t}");
        }
    }
    for name in ["fx__structured", "fx__links"] {
        let r = old.call_tool(name, json!({})).await;
        let result = r.result();
        assert!(
            result.get("structuredContent").is_none(),
            "{name}: {result}"
        );
        let blocks = result["content"].as_array().unwrap();
        assert!(
            blocks.iter().all(|b| b["type"] != "resource_link"),
            "{name}: {result}"
        );
        if name == "fx__links" {
            assert!(
                blocks[0]["text"]
                    .as_str()
                    .unwrap()
                    .contains("fx+fx://static"),
                "{result}"
            );
        }
    }
}

#[tokio::test]
async fn batches_work_only_for_2025_03_26_sessions() {
    let gw = TestGateway::start(
        "[server]\nmetrics_listen = \"off\"\n[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n",
    )
    .await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                       {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])
    .to_string();
    for (version, ok) in [
        ("2025-03-26", true),
        ("2025-06-18", false),
        ("2025-11-25", false),
    ] {
        let mut s = gw.client();
        s.initialize_version(version, json!({})).await;
        let r = s.post(&[], batch.clone()).await;
        if ok {
            assert_eq!(r.status, 200, "{version}: {r:?}");
            assert_eq!(r.json().as_array().map(Vec::len), Some(2), "{version}");
        } else {
            assert_eq!(r.status, 400, "{version}: {r:?}");
            assert_eq!(r.json()["error"]["code"], -32600, "{version}");
        }
    }
}

/// With the 2026-07-28 face off (`[server] modern = "off"`), a modern probe gets
/// 400 with a *non-modern* JSON-RPC error that carries the request id, names the
/// revisions served and says to use `initialize`. A `-32022` would tell rmcp (and
/// the spec's backward-compatibility rule) "modern server, retry" instead of
/// "fall back".
#[tokio::test]
async fn a_modern_probe_gets_a_non_modern_error_with_its_id_and_falls_back() {
    let gw =
        TestGateway::start("[server]\nmetrics_listen = \"127.0.0.1:0\"\nmodern = \"off\"\n").await;
    let envelope = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "0"}
    });
    let modern_headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let session = gw.session().await;
    let session_id = session.session.clone().unwrap();
    let probes = [
        // rmcp / TypeScript / Python / Go: discover with the full envelope.
        (
            json!("probe-1"),
            json!({"jsonrpc": "2.0", "id": "probe-1", "method": "server/discover",
                   "params": {"_meta": envelope}}),
            &modern_headers[..],
        ),
        // An ordinary method with the modern claim (numeric id).
        (
            json!(7),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
                   "params": {"_meta": envelope}}),
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
            ][..],
        ),
        // A claim-less discover without a session.
        (
            json!(8),
            json!({"jsonrpc": "2.0", "id": 8, "method": "server/discover"}),
            &[][..],
        ),
        // The claim wins over a valid Mcp-Session-Id (classified before lookup).
        (
            json!(9),
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list",
                   "params": {"_meta": envelope}}),
            &[("mcp-session-id", session_id.as_str())][..],
        ),
    ];
    let fresh = gw.client();
    for (id, body, extra) in probes {
        let r = fresh.post(extra, body.to_string()).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        let v = r.json();
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        assert_eq!(v["id"], id, "the error echoes the request id: {v}");
        let code = v["error"]["code"].as_i64().expect("a JSON-RPC error code");
        assert_ne!(
            code, -32022,
            "never the modern UnsupportedProtocolVersion: {v}"
        );
        assert!(
            ![-32020, -32021].contains(&code),
            "no other modern-era code either: {v}"
        );
        assert_eq!(code, -32000, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        for served in ["2025-11-25", "2025-06-18", "2025-03-26", "initialize"] {
            assert!(
                message.contains(served),
                "message names {served}: {message}"
            );
        }
        assert!(r.header("mcp-session-id").is_none(), "{r:?}");
    }
    // The refusals are counted under their own reason.
    let text = common::scrape(&gw).await;
    assert_eq!(
        common::metric(
            &text,
            "mcpgate_rejections_total",
            &[("reason", "modern_probe")]
        ),
        Some(4.0),
        "{text}"
    );
    // What a probing client does next works: initialize (rmcp asks for
    // 2026-07-28 there) negotiates down to 2025-11-25.
    let mut c = gw.client();
    let init = c.initialize_version("2026-07-28", json!({})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
}

/// Content blocks inside `tools/call` and `prompts/get` results are shaped for the
/// host's revision, as list items are: `icons` (2025-11-25) never reach a
/// 2025-06-18 host, and a 2025-03-26 host gets no `resource_link` block (it becomes
/// text naming the URI) and no `annotations.lastModified` (2025-06-18). A
/// 2025-03-26 host that declares `elicitation` anyway (its revision has none) is
/// never sent `elicitation/create`: the backend gets the refusal at once.
#[tokio::test]
async fn content_blocks_in_results_are_shaped_for_the_hosts_revision() {
    let dir = common::TestDir::new();
    rich_tools(&dir);
    let gw = TestGateway::start_in(
        dir,
        r#"
        [server]
        metrics_listen = "off"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/tools.json"]
        mode = "per_session"
        "#,
    )
    .await;
    let greet = json!({"name": "fx__greet", "arguments": {"name": "Ada"}});
    for (version, link, icons, modified) in [
        ("2025-11-25", true, true, true),
        ("2025-06-18", true, false, true),
        ("2025-03-26", false, false, false),
    ] {
        let mut s = gw.client();
        s.initialize_version(version, json!({})).await;
        let tool = s.call_tool("fx__structured", json!({})).await;
        let prompt = s.request("prompts/get", greet.clone()).await;
        let blocks = [
            tool.result()["content"][1].clone(),
            prompt.result()["messages"][2]["content"].clone(),
        ];
        for b in &blocks {
            assert_eq!(b["type"] == "resource_link", link, "{version}: {b}");
            assert_eq!(b.get("icons").is_some(), icons, "{version}: {b}");
            assert_eq!(
                b.pointer("/annotations/lastModified").is_some(),
                modified,
                "{version}: {b}"
            );
            if !link {
                assert_eq!(b["text"], "static: fx+fx://static", "{version}: {b}");
            } else {
                assert_eq!(b["title"], "Static", "{version}: {b}");
            }
        }
        let earlier = &prompt.result()["messages"][1]["content"];
        assert_eq!(earlier["resource"]["uri"], "fx+fx://item/9", "{version}");
    }

    let mut old = gw.client();
    old.initialize_version("2025-03-26", json!({"elicitation": {}}))
        .await;
    let started = tokio::time::Instant::now();
    let r = old.call_tool("fx__ask_elicit", json!({})).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    let text = r.result()["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("error:"), "{text}");
    assert!(
        r.related
            .iter()
            .all(|m| m["method"] != "elicitation/create"),
        "{:?}",
        r.related
    );
}
