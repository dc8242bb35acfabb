//! Smoke test: host → gateway → fx-stdio and fx-http → host.

mod common;

use common::{FakeHttp, TestGateway, text_of};
use serde_json::json;

#[tokio::test]
async fn echo_through_stdio_and_http_backends() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [backends.fx]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        [backends.web]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    let c = gw.session().await;
    let r = c.call_tool("fx__echo", json!({"text": "hi"})).await;
    assert_eq!(text_of(&r.response), "hi");
    let r = c.call_tool("web__echo", json!({"text": "ho"})).await;
    assert_eq!(text_of(&r.response), "ho");
    gw.shutdown().await;
}
