//! Overlapping requests with the same JSON-RPC id (`1`, `1`, `"1"` on one session,
//! `1` on another) through one shared stdio backend never cross-wire.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{FX_LOGGED, Rpc, TestGateway, logged_calls, wait_for};
use serde_json::{Value, json};

fn delay_echo(ms: u64, tag: &str) -> Value {
    json!({"name": "fx__delay_echo", "arguments": {"ms": ms, "tag": tag}})
}

fn tag_of(r: &Rpc) -> Option<&str> {
    r.response
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
}

#[tokio::test]
async fn same_ids_on_overlapping_calls_get_their_own_results() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s1 = gw.session().await;
    let s2 = gw.session().await;
    let a = {
        let s1 = s1.clone();
        tokio::spawn(async move {
            s1.request_id(json!(1), "tools/call", delay_echo(1500, "A"))
                .await
        })
    };
    assert!(
        wait_for(Duration::from_secs(3), || logged_calls(&log, "delay_echo")
            .len()
            == 1)
        .await
    );
    let (b, c, d) = tokio::join!(
        s1.request_id(json!(1), "tools/call", delay_echo(100, "B")),
        s1.request_id(json!("1"), "tools/call", delay_echo(500, "C")),
        s2.request_id(json!(1), "tools/call", delay_echo(300, "D")),
    );
    let a = a.await.unwrap();

    assert_eq!(a.response["id"], json!(1));
    assert_eq!(tag_of(&a), Some("A"), "{}", a.response);
    assert_eq!(b.response["id"], json!(1));
    match tag_of(&b) {
        Some(tag) => assert_eq!(tag, "B"),
        None => assert_eq!(
            b.error_code(),
            Some(-32600),
            "in-flight duplicate: {}",
            b.response
        ),
    }
    assert_eq!(c.response["id"], json!("1"), "string id stays a string");
    assert_eq!(tag_of(&c), Some("C"), "{}", c.response);
    assert_eq!(d.response["id"], json!(1));
    assert_eq!(tag_of(&d), Some("D"), "{}", d.response);

    let calls = logged_calls(&log, "delay_echo");
    let forwarded = if tag_of(&b).is_some() { 4 } else { 3 };
    assert_eq!(calls.len(), forwarded);
    let ids: BTreeSet<String> = calls.iter().map(|c| c["msg"]["id"].to_string()).collect();
    assert_eq!(ids.len(), forwarded, "distinct upstream ids: {ids:?}");
}
