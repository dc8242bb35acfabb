//! A large tool result (~2 MiB) from a stdio and an HTTP backend reaches the
//! host byte for byte as the backend wrote it, except for the rewritten URIs
//! of its resource link, embedded resource and `_meta.ui.resourceUri`; a
//! resource link quoted inside a text block is text and stays as it is. Also
//! through an SSE-only `Accept` (one `message` event).

mod common;

use common::{FakeHttp, TestGateway};
use serde_json::{Value, json};

/// Bytes of the padding text and of the embedded resource's text (2 MiB in all).
const PAD: usize = 1024 * 1024;

/// What the fake backends' `links` tool answers with `pad` (mirrors
/// `tests/support/tools.rs`), URIs given the prefix `prefix`.
fn expected(prefix: &str) -> Value {
    let quoted = r#"{"type": "resource_link", "uri": "fx://in-text"} é \ "#;
    let said: String = quoted.chars().cycle().take(PAD).collect();
    json!({"content": [
        {"type": "text", "text": said},
        {"type": "resource_link", "uri": format!("{prefix}fx://static"), "name": "static"},
        {"type": "resource", "resource": {"uri": format!("{prefix}fx://item/7"), "text": "7".repeat(PAD)}}
    ], "_meta": {"ui": {"resourceUri": format!("{prefix}fx://item/8")}}})
}

#[tokio::test]
async fn a_large_result_comes_back_byte_exact_but_for_its_uris() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        // A JSON answer however slow the (debug) rewrite of 2 MiB is.
        "[server]\njson_response_window = \"30s\"\n\
         [backends.a]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         [backends.b]\ntype = \"http\"\nurl = \"{}\"\n",
        fx.url
    ))
    .await;
    let s = gw.session().await;
    for (n, backend) in ["a", "b"].into_iter().enumerate() {
        // The backend's own bytes are serde_json's of the same value (the
        // rewrite keeps key order): only the three URIs may differ.
        let want = serde_json::to_string(&expected(&format!("{backend}+"))).unwrap();
        assert!(want.len() > 2 * PAD, "{}", want.len());
        let id = 100 + n;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": format!("{backend}__links"), "arguments": {"pad": PAD}}});
        let raw = s.post(&[], call.to_string()).await;
        assert_eq!(raw.status, 200, "{backend}");
        assert_eq!(raw.header("content-type"), Some("application/json"));
        let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#);
        let body = std::str::from_utf8(&raw.body).unwrap();
        assert!(body.starts_with(&head), "{backend}: {}", &body[..80]);
        assert!(body.ends_with('}'));
        let result = &body[head.len()..body.len() - 1];
        assert_eq!(result.len(), want.len(), "{backend}");
        assert!(result == want, "{backend}: not byte-exact");
        let content_length = raw.header("content-length").map(str::parse::<usize>);
        assert_eq!(content_length, Some(Ok(body.len())), "{backend}");

        // The same through an SSE-only Accept: one event carrying the answer.
        let sse = s
            .post(&[("accept", "text/event-stream")], call.to_string())
            .await;
        assert_eq!(sse.status, 200, "{backend}");
        let text = std::str::from_utf8(&sse.body).unwrap();
        let data = text
            .strip_prefix("event: message\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"));
        assert!(
            data == Some(body),
            "{backend}: the SSE event is not the JSON answer"
        );

        // Nothing to rewrite (the quoted link is text): the backend's bytes pass.
        let said = expected("")["content"][0]["text"].clone();
        let want = serde_json::to_string(&json!({"content": [{"type": "text", "text": said}]}));
        let call = json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/call",
            "params": {"name": format!("{backend}__echo"), "arguments": {"text": said}}});
        let raw = s.post(&[], call.to_string()).await;
        let head = format!(r#"{{"jsonrpc":"2.0","id":{},"result":"#, id + 10);
        let body = std::str::from_utf8(&raw.body).unwrap();
        let result = body.strip_prefix(&head).and_then(|b| b.strip_suffix('}'));
        assert!(
            result == want.as_deref().ok(),
            "{backend}: echo not byte-exact"
        );
    }
}
