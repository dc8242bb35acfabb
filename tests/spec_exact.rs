//! Spec-exactness at the edges of the Streamable HTTP face (a newcomer's
//! findings): lone surrogate escapes (RFC 8259 §8.2), a non-string
//! `requestState` on the 2026-07-28 ladder, `initialize` carrying a live
//! session's id, two standalone GET streams at once, host input echoed in
//! errors, a non-UTF-8 `charset`, a malformed response POSTed by the host,
//! unsupported HTTP methods, and a client that closes mid-body.

mod common;

use std::time::Duration;

use common::{FX, TestGateway};
use serde_json::json;

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
