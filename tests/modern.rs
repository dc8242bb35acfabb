//! The 2026-07-28 (stateless) face on the same endpoint, over legacy backends:
//! the validation ladder (each rung's status and code, the request id echoed),
//! `server/discover`, the served methods with `resultType` and cache hints, the
//! removed methods (404), GET/DELETE (405), batches, and a closed response stream
//! cancelling the call upstream.

mod common;

use std::time::Duration;

use common::modern_host::{MODERN, modern, send};
use common::{TestGateway, logged, logged_calls, wait_for};
use serde_json::{Value, json};

/// The built-in demo backend, per session (as in the embedded default config),
/// spoken to as a legacy backend: this file is about the bridge (the demo serves
/// 2026-07-28 too, and `auto` would find that).
fn demo() -> String {
    format!(
        r#"
        [server]
        metrics_listen = "127.0.0.1:0"
        [backends.demo]
        type = "stdio"
        command = "{}"
        args = ["demo-server"]
        mode = "per_session"
        era = "legacy"
        "#,
        env!("CARGO_BIN_EXE_mcpgate")
    )
}

#[tokio::test]
async fn discover_lists_every_served_revision_and_the_modern_capabilities() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    let (body, h) = modern(json!("d-1"), "server/discover", json!({}));
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("mcp-session-id").is_none(),
        "never a session id: {r:?}"
    );
    let v = r.json();
    assert_eq!(v["id"], "d-1");
    let res = &v["result"];
    assert_eq!(
        res["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    assert!(res["capabilities"]["tools"].is_object(), "{res}");
    assert!(res["capabilities"].get("tasks").is_none(), "{res}");
    assert_eq!(res["resultType"], "complete");
    assert_eq!(res["ttlMs"], 0);
    assert_eq!(res["cacheScope"], "private");
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpgate"
    );
    assert_eq!(gw.gateway().session_count(), 0, "stateless: no session");
}

#[tokio::test]
async fn lists_calls_reads_prompts_and_completions_work_without_a_session() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    let (body, h) = modern(json!(1), "tools/list", json!({}));
    let v = send(&c, &body, &h).await.json();
    let tools = v["result"]["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["name"] == "demo__echo"), "{v}");
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(v["result"]["cacheScope"], "private");
    let (body, h) = modern(
        json!(2),
        "tools/call",
        json!({"name": "demo__echo", "arguments": {"text": "hi"}}),
    );
    let v = send(&c, &body, &h).await.json();
    assert_eq!(v["result"]["content"][0]["text"], "hi", "{v}");
    assert_eq!(v["result"]["resultType"], "complete");
    assert!(
        v["result"].get("ttlMs").is_none(),
        "a call is not cacheable: {v}"
    );
    let (body, h) = modern(
        json!(3),
        "resources/read",
        json!({"uri": "demo+demo://readme"}),
    );
    let v = send(&c, &body, &h).await.json();
    assert_eq!(
        v["result"]["contents"][0]["uri"], "demo+demo://readme",
        "{v}"
    );
    assert_eq!(v["result"]["ttlMs"], 0, "{v}");
    let (body, h) = modern(
        json!(4),
        "prompts/get",
        json!({"name": "demo__test_simple_prompt"}),
    );
    let v = send(&c, &body, &h).await.json();
    assert!(v["result"]["messages"].is_array(), "{v}");
    // A missing resource is -32602 on this revision (never -32002), with its URI.
    let (body, h) = modern(
        json!(5),
        "resources/read",
        json!({"uri": "demo+demo://nope"}),
    );
    let v = send(&c, &body, &h).await.json();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let (body, h) = modern(json!(6), "resources/read", json!({"uri": "nowhere://x"}));
    let v = send(&c, &body, &h).await.json();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["uri"], "nowhere://x", "{v}");
    assert_eq!(gw.gateway().session_count(), 0);
    // Counted under their era; a legacy session's call under the other one.
    let legacy = gw.session().await;
    legacy.call_tool("demo__echo", json!({"text": "old"})).await;
    let text = common::scrape(&gw).await;
    let calls = |era| {
        common::metric(
            &text,
            "mcpgate_requests_total",
            &[("method", "tools/call"), ("era", era)],
        )
    };
    assert_eq!(
        (calls("modern"), calls("legacy")),
        (Some(1.0), Some(1.0)),
        "{text}"
    );
}

#[tokio::test]
async fn the_validation_ladder_answers_in_order_with_the_request_id() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    // Rung 1: _meta without the required fields.
    for meta in [
        json!({"io.modelcontextprotocol/protocolVersion": MODERN}),
        json!({}),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": "m", "method": "server/discover", "params": {"_meta": meta}});
        let h = [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "server/discover"),
        ];
        let r = c.post(&h, body.to_string()).await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.json()["error"]["code"], -32602, "{r:?}");
        assert_eq!(r.json()["id"], "m", "{r:?}");
    }
    // Rung 2: a header that disagrees with the body, before the version rung.
    let (mut body, h) = modern(json!(7), "server/discover", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let r = send(&c, &body, &h).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].clone()),
        (400, json!(-32020)),
        "{r:?}"
    );
    assert_eq!(r.json()["id"], 7);
    let (body, mut h) = modern(json!(8), "tools/list", json!({}));
    h[1].1 = "tools/call".into();
    let r = send(&c, &body, &h).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].clone()),
        (400, json!(-32020)),
        "{r:?}"
    );
    let (body, mut h) = modern(
        json!(9),
        "tools/call",
        json!({"name": "demo__echo", "arguments": {}}),
    );
    h.retain(|(k, _)| k != "mcp-name");
    let r = send(&c, &body, &h).await;
    assert_eq!(
        r.json()["error"]["code"],
        -32020,
        "Mcp-Name is required: {r:?}"
    );
    // Mcp-Name in its base64 form is decoded before comparing.
    let (body, mut h) = modern(
        json!(10),
        "tools/call",
        json!({"name": "demo__echo", "arguments": {"text": "b"}}),
    );
    h[2].1 = "=?base64?ZGVtb19fZWNobw==?=".into();
    let r = send(&c, &body, &h).await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "b", "{r:?}");
    // Rung 3: an unsupported revision, header and body agreeing.
    let (mut body, mut h) = modern(json!(11), "server/discover", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    h[0].1 = "v999.0.0".into();
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 400, "{r:?}");
    let v = r.json();
    assert_eq!(v["error"]["code"], -32022, "{v}");
    assert_eq!(v["error"]["data"]["requested"], "v999.0.0");
    assert_eq!(v["error"]["data"]["supported"][0], MODERN, "{v}");
    assert_eq!(v["id"], 11);
    // A session revision claimed without a session: served, but through initialize.
    let (mut body, mut h) = modern(json!(12), "server/discover", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    h[0].1 = "2025-11-25".into();
    let v = send(&c, &body, &h).await.json();
    assert_eq!(v["error"]["code"], -32022, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("session revision (send initialize)"),
        "{v}"
    );
    // Rung 4: removed and unknown methods are 404 -32601, with a valid envelope.
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "unknown/method",
    ] {
        let (body, h) = modern(json!(method), method, json!({}));
        let r = send(&c, &body, &h).await;
        assert_eq!(r.status, 404, "{method}: {r:?}");
        assert_eq!(r.json()["error"]["code"], -32601, "{method}: {r:?}");
        assert_eq!(r.json()["id"], method);
    }
    // An unknown log level is refused.
    let (mut body, h) = modern(json!(12), "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    let r = send(&c, &body, &h).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r:?}"
    );
    // Every refusal is counted under its reason.
    let text = common::scrape(&gw).await;
    for (reason, n) in [
        ("modern_envelope", 3.0),
        ("header_mismatch", 3.0),
        ("version", 2.0),
        ("method_not_found", 6.0),
    ] {
        assert_eq!(
            common::metric(
                &text,
                "mcpgate_rejections_total",
                &[("reason", reason), ("era", "modern")]
            ),
            Some(n),
            "{reason}: {text}"
        );
    }
}

/// A `_meta` field of the wrong type is named as such, not as missing.
#[tokio::test]
async fn a_wrong_typed_meta_field_says_what_type_it_must_be() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "server/discover"),
    ];
    for (meta, needle) in [
        (
            json!({"io.modelcontextprotocol/protocolVersion": 20260728, "io.modelcontextprotocol/clientCapabilities": {}}),
            r#"params._meta["io.modelcontextprotocol/protocolVersion"] must be a string"#,
        ),
        (
            json!({"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": []}),
            r#"params._meta["io.modelcontextprotocol/clientCapabilities"] must be an object"#,
        ),
        (
            json!({"io.modelcontextprotocol/protocolVersion": MODERN}),
            r#"params._meta["io.modelcontextprotocol/clientCapabilities"] is required"#,
        ),
        (json!([1]), "params._meta must be an object"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": "w", "method": "server/discover", "params": {"_meta": meta}});
        let r = c.post(&h, body.to_string()).await;
        assert_eq!(r.status, 400, "{r:?}");
        let v = r.json();
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(v["id"], "w", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message} lacks {needle}");
    }
}

/// A body whose routed member (`params.name`, `params.uri`) is missing or not a
/// string is -32602 naming it, before the headers are compared with it: no
/// header can mirror a value of the wrong type, so the body is what is wrong
/// (not -32020).
#[tokio::test]
async fn a_routed_member_of_the_wrong_type_is_invalid_params_before_the_headers() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    for (method, params, named, mcp_name) in [
        (
            "tools/call",
            json!({"name": 5, "arguments": {}}),
            "params.name",
            None,
        ),
        ("tools/call", json!({"name": 5}), "params.name", Some("5")),
        (
            "tools/call",
            json!({"arguments": {}}),
            "params.name",
            Some("demo__echo"),
        ),
        ("prompts/get", json!({"name": ["p"]}), "params.name", None),
        ("resources/read", json!({"uri": 5}), "params.uri", Some("5")),
    ] {
        let (body, mut h) = modern(json!("t"), method, params.clone());
        if let Some(n) = mcp_name {
            h.push(("mcp-name".to_owned(), n.to_owned()));
        }
        let r = send(&c, &body, &h).await;
        let v = r.json();
        assert_eq!(
            (r.status.as_u16(), v["error"]["code"].clone()),
            (400, json!(-32602)),
            "{method} {params}: {v}"
        );
        assert_eq!(v["id"], "t", "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{method} {params}: {message}");
    }
}

/// `subscriptions/listen` takes a `SubscriptionFilter` object in `notifications`
/// (MCP 2026-07-28 basic/patterns/subscriptions): a filter or member of the wrong
/// type is -32602 naming it, not acknowledged.
#[tokio::test]
async fn a_listen_filter_of_the_wrong_type_is_invalid_params() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    for (params, named) in [
        (json!({"notifications": "x"}), "params.notifications"),
        (json!({}), "params.notifications"),
        (
            json!({"notifications": {"toolsListChanged": "yes"}}),
            "params.notifications.toolsListChanged",
        ),
        (
            json!({"notifications": {"resourceSubscriptions": "demo://x"}}),
            "params.notifications.resourceSubscriptions",
        ),
        (
            json!({"notifications": {"resourceSubscriptions": [1]}}),
            "params.notifications.resourceSubscriptions",
        ),
    ] {
        let (body, h) = modern(json!("L"), "subscriptions/listen", params.clone());
        let v = common::modern_host::answer(&c, &body, &h).await;
        assert_eq!(v["error"]["code"], -32602, "{params}: {v}");
        assert_eq!(v["id"], "L", "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{params}: {message}");
    }
}

#[tokio::test]
async fn the_claim_wins_over_a_session_header_and_never_touches_the_session() {
    let gw = TestGateway::start(&demo()).await;
    let legacy = gw.session().await;
    let sid = legacy.session.clone().unwrap();
    let c = gw.client();
    let (body, mut h) = modern(json!(1), "tools/list", json!({}));
    h.push(("mcp-session-id".into(), sid));
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["result"]["tools"].is_array(), "{r:?}");
    assert!(r.header("mcp-session-id").is_none(), "{r:?}");
    // Without the claim but under a modern header: the first rung fails.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r = c
        .post(
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/list"),
            ],
            body.to_string(),
        )
        .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{r:?}"
    );
    // The legacy session is untouched and still works.
    let r = legacy.request("tools/list", json!({})).await;
    assert!(r.result()["tools"].is_array());
}

#[tokio::test]
async fn get_and_delete_are_405_and_batches_with_a_claim_are_400() {
    let gw = TestGateway::start(&demo()).await;
    let c = gw.client();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let mut h = c.headers();
        h.insert("mcp-protocol-version", MODERN.parse().unwrap());
        let r = c.send_raw(method.clone(), h, reqwest::Body::from("")).await;
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_eq!(r.header("allow"), Some("POST"), "{r:?}");
    }
    let mut legacy = gw.client();
    legacy.initialize_version("2025-03-26", json!({})).await;
    let (one, _) = modern(json!(1), "tools/list", json!({}));
    let batch = json!([one, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]);
    let r = legacy.post(&[], batch.to_string()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32600, "{r:?}");
}

#[tokio::test]
async fn a_closed_response_stream_cancels_the_call_upstream() {
    let gw = TestGateway::start(
        r#"
        [backends.slow]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--log", "${TEST_DIR}/slow.log", "--never-answer", "echo"]
        "#,
    )
    .await;
    let log = gw.dir.path("slow.log");
    let c = gw.client();
    let (body, h) = modern(
        json!(1),
        "tools/call",
        json!({"name": "slow__echo", "arguments": {"text": "x"}}),
    );
    // A raw connection, so that closing it is certain (a pooled HTTP client may
    // keep the socket).
    let addr = c
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let text = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        text.len()
    );
    for (k, v) in &h {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.write_all(format!("{head}{text}").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
        .await
        .expect("the stream's head arrives")
        .unwrap();
    let got = String::from_utf8_lossy(&buf[..n]);
    assert!(
        got.contains("text/event-stream"),
        "a slow answer streams: {got}"
    );
    assert!(
        wait_for(Duration::from_secs(5), || !logged_calls(&log, "echo")
            .is_empty())
        .await
    );
    let upstream: Value = logged_calls(&log, "echo")[0]["msg"]["id"].clone();
    drop(sock);
    let cancelled = || {
        logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(
        wait_for(Duration::from_secs(5), cancelled).await,
        "closing the stream cancels the call upstream: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
