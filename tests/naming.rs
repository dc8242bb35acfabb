//! Namespacing: duplicate names across unprefixed backends are kept apart, not
//! dropped; names outside the allowed alphabet (`/`, non-ASCII) are made valid and
//! stay distinct; one bad `inputSchema` does not make a strict host drop every
//! tool.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{McpClient, TestDir, TestGateway, names, text_of};
use serde_json::{Value, json};

fn valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

async fn whoami_by_name(s: &McpClient) -> BTreeMap<String, String> {
    let tools = s.list_all("tools/list", "tools").await;
    let mut out = BTreeMap::new();
    for name in names(&tools)
        .into_iter()
        .filter(|n| n.starts_with("whoami"))
    {
        let r = s.call_tool(&name, json!({})).await;
        out.insert(name, text_of(&r.response).to_owned());
    }
    out
}

fn two_unprefixed(first: &str, second: &str) -> String {
    let backend = |name: &str| {
        format!(
            "[backends.{name}]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--label\", \"{name}\"]\nprefix = \"\"\n"
        )
    };
    format!("{}{}", backend(first), backend(second))
}

#[tokio::test]
async fn duplicate_unprefixed_tools_stay_reachable_and_names_are_stable() {
    let gw = TestGateway::start(&two_unprefixed("prom-eu", "prom-us")).await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    let all = names(&tools);
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "names are unique: {all:?}");
    let first = whoami_by_name(&s).await;
    let labels: BTreeSet<&String> = first.values().collect();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(
        labels.len(),
        2,
        "each whoami reaches its own backend: {first:?}"
    );
    let dir = gw.shutdown().await;

    // Restart, backends written in the other order: same names, same routes.
    let gw = TestGateway::start_in(dir, &two_unprefixed("prom-us", "prom-eu")).await;
    let s = gw.session().await;
    assert_eq!(whoami_by_name(&s).await, first);
    gw.shutdown().await;
}

#[tokio::test]
async fn separator_inside_names_does_not_collide() {
    let dir = TestDir::new();
    std::fs::write(
        dir.path("a.json"),
        r#"[{"name":"b__c","inputSchema":{"type":"object"}}]"#,
    )
    .unwrap();
    std::fs::write(
        dir.path("z.json"),
        r#"[{"name":"a__b__c","inputSchema":{"type":"object"}}]"#,
    )
    .unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [backends.a]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/a.json"]
        [backends.z]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/z.json"]
        prefix = ""
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    let called: BTreeSet<String> = {
        let mut out = BTreeSet::new();
        for t in &tools {
            let name = t["name"].as_str().unwrap();
            if name.contains("b__c") {
                out.insert(text_of(&s.call_tool(name, json!({})).await.response).to_owned());
            }
        }
        out
    };
    assert_eq!(
        called,
        BTreeSet::from(["called a__b__c".to_owned(), "called b__c".to_owned()])
    );
}

#[tokio::test]
async fn weird_names_become_valid_distinct_and_route_to_the_original() {
    let originals = [
        "read/file".to_owned(),
        "a.b/c".to_owned(),
        "天气预报".to_owned(),
        "天气查询".to_owned(),
        "café".to_owned(),
        "cafe".to_owned(),
        "with space".to_owned(),
        "x".repeat(200),
    ];
    let defs: Vec<Value> = originals
        .iter()
        .map(|n| json!({"name": n, "inputSchema": {"type": "object"}}))
        .collect();
    let dir = TestDir::new();
    std::fs::write(
        dir.path("tools.json"),
        serde_json::to_string(&defs).unwrap(),
    )
    .unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [backends.fs]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/tools.json"]
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    let all = names(&tools);
    for n in &all {
        assert!(valid(n), "invalid exposed name {n:?}");
    }
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), all.len());
    for original in &originals {
        let tool = tools
            .iter()
            .find(|t| {
                t.get("title").and_then(Value::as_str) == Some(original.as_str())
                    || t["name"] == format!("fs__{original}")
            })
            .unwrap_or_else(|| panic!("{original} is listed (by name or title)"));
        let r = s.call_tool(tool["name"].as_str().unwrap(), json!({})).await;
        assert_eq!(text_of(&r.response), format!("called {original}"));
    }
}

#[tokio::test]
async fn bad_input_schemas_are_repaired_or_omitted_and_good_tools_stay() {
    let bad = json!([
        {"name": "t1", "inputSchema": {}},
        {"name": "t2", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#"}},
        {"name": "t3", "inputSchema": {"anyOf": [{"type": "object"}, {"type": "object"}]}},
        {"name": "t4"},
        {"name": "t5", "inputSchema": null},
        {"name": "t6", "inputSchema": {"type": "object"}},
        {"name": "t7", "inputSchema": {"type": "string"}},
        {"name": "t8", "inputSchema": "nope"}
    ]);
    let dir = TestDir::new();
    std::fs::write(dir.path("bad.json"), bad.to_string()).unwrap();
    let gw = TestGateway::start_in(
        dir,
        r#"
        [backends.bad]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/bad.json"]
        [backends.good]
        type = "stdio"
        command = "${FAKE_STDIO}"
        "#,
    )
    .await;
    let s = gw.session().await;
    let tools = s.list_all("tools/list", "tools").await;
    for t in &tools {
        let schema = &t["inputSchema"];
        assert!(schema.is_object(), "{t}");
        assert_eq!(schema["type"], "object", "{t}");
    }
    let all = names(&tools);
    assert!(all.contains(&"good__echo".to_owned()));
    assert!(all.contains(&"bad__echo".to_owned()));
    for t in ["t1", "t2", "t3", "t4", "t5", "t6"] {
        assert!(
            all.contains(&format!("bad__{t}")),
            "{t} kept (repaired): {all:?}"
        );
    }
    let t6 = tools.iter().find(|t| t["name"] == "bad__t6").unwrap();
    assert_eq!(
        t6["inputSchema"],
        json!({"type": "object"}),
        "valid schema untouched"
    );
}
