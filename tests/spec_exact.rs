//! Spec-exactness at the edges of the Streamable HTTP face (a newcomer's
//! findings): lone surrogate escapes (RFC 8259 §8.2), a non-string
//! `requestState` on the 2026-07-28 ladder, `initialize` carrying a live
//! session's id, two standalone GET streams at once, host input echoed in
//! errors, a non-UTF-8 `charset`, a malformed response POSTed by the host,
//! unsupported HTTP methods, and a client that closes mid-body.

mod common;

use std::time::Duration;

use common::{FX, TestGateway, text_of};
use serde_json::{Value, json};

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
    // An id could not be echoed back as sent: refused, with no id to echo.
    let r = s
        .post(&[], r#"{"jsonrpc":"2.0","id":"a\ud800","method":"ping"}"#)
        .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
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
