//! Protocol versions and protocol headers: each backend gets the version
//! negotiated with it (BR-12), configured headers never replace protocol
//! headers upstream (BR-01), downstream version header validation.

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
            if r.rpc_method() == Some("initialize") {
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
    let r = s.post(&[("mcp-protocol-version", "")], ping).await;
    assert_eq!(r.status, 200, "absent header: negotiated version applies");

    let mut c = gw.client();
    let v = c.initialize_version("2030-01-01", json!({})).await;
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
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
