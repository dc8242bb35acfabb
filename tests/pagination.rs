//! Pagination: a paginating backend is fetched completely; hosts get the
//! gateway's own pages with opaque cursors; a tampered cursor is -32602.

mod common;

use std::collections::BTreeSet;

use common::{TestGateway, logged, names};
use serde_json::json;

const BUILTIN_TOOLS: usize = 14;

#[tokio::test]
async fn a_paginating_backend_is_fetched_completely() {
    let gw = TestGateway::start(
        r#"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--page-size", "2", "--log", "${TEST_DIR}/fx.log"]
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    assert_eq!(tools.len(), BUILTIN_TOOLS, "{:?}", names(&tools));
    let pages = logged(&gw.dir.path("fx.log"), "tools/list");
    assert_eq!(
        pages.len(),
        BUILTIN_TOOLS.div_ceil(2),
        "every upstream page fetched"
    );
}

#[tokio::test]
async fn hosts_get_gateway_pages_with_opaque_cursors() {
    let gw = TestGateway::start(
        r#"
        [server]
        page_size = 3
        [backends.a]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--page-size", "4"]
        [backends.b]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let s = gw.session().await;
    let first = s.request("tools/list", json!({})).await;
    let page = first.result();
    assert_eq!(page["tools"].as_array().unwrap().len(), 3);
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    assert!(
        !cursor.contains("fx-page"),
        "opaque, not the backend's: {cursor}"
    );

    let all = names(&s.list_all("tools/list", "tools").await);
    assert_eq!(all.len(), 2 * BUILTIN_TOOLS);
    assert_eq!(
        all.iter().collect::<BTreeSet<_>>().len(),
        all.len(),
        "no duplicates"
    );

    let mut tampered: Vec<char> = cursor.chars().collect();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == 'A' { 'B' } else { 'A' };
    let tampered: String = tampered.into_iter().collect();
    for bad in [tampered.as_str(), "garbage", "fx-page-2", ""] {
        let r = s.request("tools/list", json!({ "cursor": bad })).await;
        assert_eq!(
            r.error_code(),
            Some(-32602),
            "cursor {bad:?}: {}",
            r.response
        );
    }
    let r = s.request("prompts/list", json!({ "cursor": cursor })).await;
    assert_eq!(r.error_code(), Some(-32602), "cursor of another list");
}
