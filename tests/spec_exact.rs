//! Spec-exactness at the edges of the Streamable HTTP face (a newcomer's
//! findings): lone surrogate escapes (RFC 8259 §8.2), a non-string
//! `requestState` on the 2026-07-28 ladder, `initialize` carrying a live
//! session's id, two standalone GET streams at once, host input echoed in
//! errors, a non-UTF-8 `charset`, a malformed response POSTed by the host,
//! unsupported HTTP methods, and a client that closes mid-body.

mod common;

use std::time::Duration;

use common::modern_host::{modern, send};
use common::served::Served;
use common::{FX, TestGateway, text_of};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// A JS client's `JSON.stringify` of a string cut inside an emoji writes a lone
/// surrogate escape. RFC 8259 §8.2 lets the grammar carry it; it is read as
/// U+FFFD (what a JS `TextEncoder` makes of it), not refused as -32700.
#[tokio::test]
async fn a_lone_surrogate_escape_is_read_as_the_replacement_character() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for (escaped, want) in [
        (r"a\ud83d", "a\u{FFFD}"),
        (r"\ude00b", "\u{FFFD}b"),
        (r"x\ud83d\ud83dy", "x\u{FFFD}\u{FFFD}y"),
        (r"ok \ud83d\ude00", "ok \u{1F600}"),
        (r"\\ud83d", r"\ud83d"),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{{"name":"fx__echo","arguments":{{"text":"{escaped}"}}}}}}"#
        );
        let r = s.post(&[], body).await;
        assert_eq!(r.status, 200, "{escaped}: {r:?}");
        let v = r.json();
        assert_eq!(v["id"], "s1", "{v}");
        assert_eq!(text_of(&v), want, "{escaped} → {v}");
    }
    // Params of a method the gateway reads whole (not kept as text) too.
    let r = s
        .post(
            &[],
            r#"{"jsonrpc":"2.0","id":"l1","method":"tools/list","params":{"_meta":{"note":"a\ud83d"}}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert!(v["result"]["tools"].is_array(), "{v}");
    // In a method name: a string, read as U+FFFD, so a method nobody serves
    // (not "method must be a string").
    let r = s
        .post(
            &[],
            r#"{"jsonrpc":"2.0","id":"m1","method":"tools/\ud800","params":{}}"#,
        )
        .await;
    let v = r.json();
    assert_eq!(v["id"], "m1", "{v}");
    assert_eq!(v["error"]["code"], -32601, "{v}");
    // An id could not be echoed back as sent: refused, with no id to echo.
    let r = s
        .post(&[], r#"{"jsonrpc":"2.0","id":"a\ud800","method":"ping"}"#)
        .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
}

#[tokio::test]
async fn a_modern_request_state_that_is_not_a_string_is_a_400_type_error() {
    let gw = TestGateway::start(FX).await;
    let c = gw.client();
    let params = json!({"name": "fx__echo", "arguments": {"text": "x"}, "requestState": 5});
    let (body, h) = modern(json!("rs"), "tools/call", params);
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 400, "{r:?}");
    let v = r.json();
    assert_eq!(v["id"], "rs", "{v}");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("params.requestState must be a string"),
        "{v}"
    );
    let params = json!({"name": "fx__echo", "arguments": {}, "inputResponses": []});
    let (body, h) = modern(json!("ir"), "tools/call", params);
    let v = send(&c, &body, &h).await;
    assert_eq!(v.status, 400, "{v:?}");
    assert!(
        v.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params.inputResponses must be an object"),
        "{v:?}"
    );
}

fn initialize(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string()
}

/// MCP 2025-11-25 basic/transports, session management: a client starts a new
/// session with an `InitializeRequest` without a session id. One that names a
/// live session is refused (400, -32600, the request's id) instead of opening a
/// second session beside it; a stale id (the session ended: the host was told
/// 404) does not stand in the way of the new session.
#[tokio::test]
async fn initialize_naming_a_live_session_is_refused_a_stale_one_is_not() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let r = s.post(&[], initialize(7)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.header("mcp-session-id").is_none(), "no second session");
    let v = r.json();
    assert_eq!(v["id"], 7, "{v}");
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already initialized"),
        "{v}"
    );
    let ping = s.request("ping", json!({})).await;
    assert!(
        ping.response.get("result").is_some(),
        "the session lives on"
    );

    assert_eq!(s.delete().await.status, 200);
    let r = s.post(&[], initialize(8)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let new = r.header("mcp-session-id").unwrap();
    assert_ne!(Some(new), s.session.as_deref());
}

/// MCP 2025-11-25 basic/transports, multiple connections: a client may hold
/// several streams; each message goes on exactly one. A second GET does not end
/// the first (two tabs took the stream from each other every `retry` second).
#[tokio::test]
async fn two_standalone_gets_stay_open_and_a_message_goes_on_one() {
    // Keep-alives every 100 ms: a closed GET is noticed when one fails.
    let gw = TestGateway::start(&format!("[server]\nsse_keep_alive = \"100ms\"\n{FX}")).await;
    let s = gw.session().await;
    let mut first = s.get_stream().await;
    assert_eq!(first.status, 200);
    let mut second = s.get_stream().await;
    assert_eq!(second.status, 200);
    assert!(
        !first.ends_within(Duration::from_secs(3)).await,
        "the first GET is not ended by the second"
    );
    assert!(!second.ends_within(Duration::from_millis(200)).await);
    let r = s.call_tool("fx__add_tool", json!({"name": "late"})).await;
    assert_eq!(r.result()["content"][0]["text"], "added late");
    let on_second = second.next(Duration::from_secs(2)).await;
    assert_eq!(
        on_second.as_ref().map(|m| m["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "the newest stream gets it"
    );
    assert!(
        first.next(Duration::from_millis(500)).await.is_none(),
        "never on both"
    );
    // The newest gone (noticed at a keep-alive), the next message goes on
    // the one still open.
    drop(second);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = s.call_tool("fx__add_tool", json!({"name": "later"})).await;
    assert_eq!(r.result()["content"][0]["text"], "added later");
    let m = first
        .next(Duration::from_secs(2))
        .await
        .expect("on the first");
    assert_eq!(m["method"], "notifications/tools/list_changed");
}

/// A host's 200 KB URI is not sent back whole in the error's `data`, nor a huge
/// revision or log level in a modern refusal.
#[tokio::test]
async fn echoed_host_input_in_errors_is_bounded() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let uri = format!("file:///{}", "u".repeat(200_000));
    let r = s.request("resources/read", json!({"uri": uri})).await;
    assert_eq!(
        r.error_code(),
        Some(-32002),
        "{}",
        r.response["error"]["code"]
    );
    let echoed = r.response["error"]["data"]["uri"].as_str().unwrap();
    assert!(echoed.len() < 400, "{} bytes echoed", echoed.len());
    assert!(echoed.starts_with("file:///uuu") && echoed.contains('…'));

    let c = gw.client();
    let huge = "9".repeat(100_000);
    let (mut body, h) = modern(json!(1), "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!(huge);
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 400);
    assert!(r.body.len() < 2000, "{} bytes", r.body.len());
    let (mut body, mut h) = modern(json!(2), "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(huge);
    h.retain(|(k, _)| k != "mcp-protocol-version");
    let r = send(&c, &body, &h).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.len() < 2000, "{} bytes", r.body.len());
}

/// JSON is UTF-8 (RFC 8259 §8.1): a body declared in another charset is 415;
/// `utf-8` in any case, quoted or not, is JSON.
#[tokio::test]
async fn a_charset_other_than_utf8_is_415() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for ct in [
        "application/json; charset=latin1",
        "application/json;charset=ISO-8859-1",
        "application/json; charset=utf-16",
    ] {
        let r = s.post(&[("content-type", ct)], ping).await;
        assert_eq!(r.status, 415, "{ct}");
        let v = r.json();
        assert!(
            v["error"]["message"].as_str().unwrap().contains("UTF-8"),
            "{ct}: {v}"
        );
    }
    for ct in [
        "application/json; charset=UTF-8",
        "application/json; charset=\"utf-8\"",
        "application/json;charset=utf8",
    ] {
        let r = s.post(&[("content-type", ct)], ping).await;
        assert_eq!(r.status, 200, "{ct}: {r:?}");
    }
}

/// A POST carrying a response that is not accepted gets an HTTP error status
/// whose optional body is a JSON-RPC error with no id (MCP 2025-11-25
/// basic/transports): a response is never answered with a response to it.
#[tokio::test]
async fn a_malformed_response_is_400_with_an_error_that_has_no_id() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#,
    ] {
        let r = s.post(&[], body).await;
        assert_eq!(r.status, 400, "{body}");
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "{body}: {v}");
        assert!(v.get("id").is_none(), "{body}: {v}");
    }
}

/// RFC 9110 §15.5.6: a 405 names the methods the endpoint serves in `Allow`;
/// its body is a JSON-RPC error like the other transport refusals.
#[tokio::test]
async fn an_unsupported_method_is_405_with_allow_and_an_error_body() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for method in ["PUT", "PATCH"] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = s.send_raw(m, s.headers(), "{}".into()).await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, POST, DELETE"), "{method}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v = r.json();
        assert_eq!(v["error"]["code"], -32000, "{method}: {v}");
        assert!(v.get("id").is_none(), "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(method),
            "{v}"
        );
    }
}

/// A client that closes its connection in the middle of the body is no bad
/// request: no answer can reach it. Its access line says so at INFO
/// (`reason="client_closed"`), and no WARN is written.
#[tokio::test]
async fn a_client_closing_mid_body_is_logged_as_such() {
    let served = Served::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{FX}"
    ))
    .await;
    let addr = served.url.trim_start_matches("http://");
    let addr = addr.split('/').next().unwrap();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n\
         {{\"jsonrpc\":\"2.0\","
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(tcp);
    let mut line = None;
    common::wait_for(Duration::from_secs(5), || {
        line = served
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["target"] == "mcpgate::access");
        line.is_some()
    })
    .await;
    let line = line.unwrap_or_else(|| panic!("no access line:\n{}", served.log()));
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["fields"]["reason"], "client_closed", "{line}");
    assert_eq!(line["fields"]["status"], 499, "{line}");
    assert!(
        !served.log().lines().any(|l| l.contains("\"WARN\"")),
        "{}",
        served.log()
    );
}
