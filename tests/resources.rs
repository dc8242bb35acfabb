//! Resources and templates of two backends are listed, distinct and readable; URIs
//! inside results are rewritten and readable; unknown → -32002.

mod common;

use common::{FakeHttp, McpClient, TestGateway};
use serde_json::{Value, json};

async fn read(s: &McpClient, uri: &str) -> Value {
    let r = s.request("resources/read", json!({ "uri": uri })).await;
    let c = &r.result()["contents"][0];
    assert_eq!(c["uri"], uri, "contents carry the gateway-visible URI");
    c["text"].clone()
}

#[tokio::test]
async fn resources_of_two_backends_are_listed_readable_and_rewritten_in_results() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [backends.a]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        [backends.b]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    let s = gw.session().await;
    let res = s.list_all("resources/list", "resources").await;
    let uris: Vec<&str> = res.iter().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(uris, ["a+fx://static", "b+fx://static"]);
    let tpls = s
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    let t: Vec<&str> = tpls
        .iter()
        .filter_map(|r| r["uriTemplate"].as_str())
        .collect();
    assert_eq!(t, ["a+fx://item/{id}", "b+fx://item/{id}"]);
    for uri in &uris {
        assert_eq!(read(&s, uri).await, "static content");
    }
    assert_eq!(read(&s, "b+fx://item/42").await, "item 42");
    assert_eq!(read(&s, "a+fx://item/43").await, "item 43");

    let r = s.call_tool("a__links", json!({})).await;
    let result = r.result();
    let link = result["content"][0]["uri"].as_str().unwrap();
    let embedded = result["content"][1]["resource"]["uri"].as_str().unwrap();
    let ui = result["_meta"]["ui"]["resourceUri"].as_str().unwrap();
    assert_eq!(
        (link, embedded, ui),
        ("a+fx://static", "a+fx://item/7", "a+fx://item/8")
    );
    assert_eq!(read(&s, link).await, "static content");
    assert_eq!(read(&s, embedded).await, "item 7");
    assert_eq!(read(&s, ui).await, "item 8");

    let r = s
        .request(
            "prompts/get",
            json!({"name": "b__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    let msgs = &r.result()["messages"];
    assert_eq!(msgs[0]["content"]["text"], "Hello, Ada!");
    assert_eq!(msgs[1]["content"]["resource"]["uri"], "b+fx://item/9");

    for unknown in ["file:///nope", "zz+fx://static", "a+fx://nope"] {
        let r = s.request("resources/read", json!({ "uri": unknown })).await;
        assert_eq!(r.error_code(), Some(-32002), "{unknown}: {}", r.response);
    }
}

/// A backend's "Resource not found" error names the URI the host
/// asked for (with the backend's prefix), not the backend's own URI.
#[tokio::test]
async fn resource_errors_name_the_exposed_uri() {
    let config = format!(
        "[backends.demo]\ntype = \"stdio\"\ncommand = {:?}\nargs = [\"demo-server\"]\n",
        env!("CARGO_BIN_EXE_mcpgate")
    );
    let gw = TestGateway::start(&config).await;
    let s = gw.session().await;
    let r = s
        .request("resources/read", json!({"uri": "demo+file:///etc/passwd"}))
        .await;
    assert_eq!(r.error_code(), Some(-32002), "{}", r.response);
    assert_eq!(
        r.response["error"]["data"]["uri"], "demo+file:///etc/passwd",
        "{}",
        r.response
    );
}
