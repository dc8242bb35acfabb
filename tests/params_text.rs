//! A routed request's params reach the backend as the host wrote them, with only
//! the routed member (`name`, `uri`) replaced: escapes, numbers, spacing and key
//! order byte for byte (the gateway's plain route writes the host's text).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{FX_LOGGED, McpClient, TestGateway, read_log, text_of};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// Posts `body` (one request, as text) and returns the answer.
async fn post(s: &McpClient, body: &str) -> Value {
    let r = s.post(&[], body.to_owned()).await;
    assert_eq!(r.status, 200, "{body}");
    r.json()
}

/// The `params` text of every request line the fake backend received (parsed or
/// not) whose text contains `marker`.
fn params_received(log: &Path, marker: &str) -> Vec<String> {
    read_log(log)
        .iter()
        .filter_map(|e| e["line"].as_str())
        .filter(|line| line.contains(marker))
        .map(|line| {
            let top: HashMap<String, Box<RawValue>> = serde_json::from_str(line).unwrap();
            top["params"].get().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn odd_but_valid_params_reach_the_backend_as_written_name_aside() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let s = gw.session().await;
    let log = gw.dir.path("fx.log");
    // Key order (`name` last), spacing, escapes of every kind, -0, 1.50, 2E+3,
    // an integer beyond u64, nesting: a `Value` round trip would change each.
    let args = concat!(
        r#"{ "text" : "caf\u00e9 \ud83d\ude00 \"q\" \/ tab\t", "m1":1,"#,
        r#" "n" : {"deep":[1,{"x":null,"y":[[]]}],"neg":-0,"big":12345678901234567890123,"#,
        r#" "f":1.50,"e":2E+3,"u":"\u0041"} }"#
    );
    let host = format!(r#"{{"arguments":{args},"z":[ ],"name":"fx__echo"}}"#);
    let body = format!(r#"{{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{host}}}"#);
    let v = post(&s, &body).await;
    assert_eq!(v["id"], 41);
    assert_eq!(
        v["result"]["content"][0]["text"], "café \u{1F600} \"q\" / tab\t",
        "{v}"
    );
    let sent = params_received(&log, "m1");
    let want = host.replace(r#""name":"fx__echo""#, r#""name":"echo""#);
    assert_eq!(sent, [want], "only the name differs");

    // A line break between tokens cannot go to a stdio backend as it is (one
    // message a line): such params take the full route and arrive re-written.
    let body = "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":\r\n\
        {\"name\":\"fx__echo\",\n\"arguments\":{\"text\":\"two\",\"m2\":1}}}";
    let v = post(&s, body).await;
    assert_eq!(v["result"]["content"][0]["text"], "two", "{v}");
    let sent = params_received(&log, "m2");
    assert_eq!(
        sent,
        [r#"{"name":"echo","arguments":{"text":"two","m2":1}}"#]
    );

    // resources/read: only the URI differs; an escaped key and URI are read.
    let host = r#"{ "extra" : {"k":[1e2]}, "\u0075ri" : "fx+fx:\/\/static" }"#;
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":"r1","method":"resources/read","params":{host}}}"#);
    let v = post(&s, &body).await;
    assert_eq!(v["result"]["contents"][0]["text"], "static content", "{v}");
    let sent = params_received(&log, "extra");
    assert_eq!(
        sent,
        [r#"{ "extra" : {"k":[1e2]}, "\u0075ri" : "fx://static" }"#]
    );
}

#[tokio::test]
async fn a_number_a_value_cannot_hold_goes_through_unless_the_gateway_must_parse() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let s = gw.session().await;
    let log = gw.dir.path("fx.log");
    // Nothing to change but the name: the text is forwarded and the backend,
    // which cannot read 1e400 either, answers for itself.
    let host = r#"{"name":"fx__echo","arguments":{"text":"h1","x":1e400}}"#;
    let body = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{host}}}"#);
    let v = post(&s, &body).await;
    assert_eq!(v["id"], 7);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("unreadable"),
        "{v}"
    );
    let sent = params_received(&log, "h1");
    assert_eq!(
        sent,
        [r#"{"name":"echo","arguments":{"text":"h1","x":1e400}}"#]
    );

    // With `_meta` the gateway needs the params as a value: it answers itself,
    // the id echoed, and nothing reaches the backend.
    let host =
        r#"{"name":"fx__echo","arguments":{"text":"h2","x":1e400},"_meta":{"progressToken":1}}"#;
    let body = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{host}}}"#);
    let v = post(&s, &body).await;
    assert_eq!(v["id"], 8);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("out of range"),
        "{v}"
    );
    assert!(params_received(&log, "h2").is_empty());

    // The session serves on.
    let r = s.call_tool("fx__echo", json!({"text": "still here"})).await;
    assert_eq!(text_of(&r.response), "still here");
}
