//! Tool curation, independent of auth: a renamed, described and filtered tool
//! appears as configured and calls the right upstream tool with the hidden
//! arguments; curated names obey the name rules.

mod auth_support;

use std::path::Path;

use auth_support::{Backend, Host, gateway};
use mcpgate::config::Config;
use serde_json::{Value, json};

fn toml(backend: &Backend) -> String {
    format!(
        r#"
        [backends.rec]
        type = "http"
        url = "{}"
        tools.exclude = ["delete_*"]
        [backends.rec.tools.overrides.file_ticket]
        name = "open_ops_ticket"
        title = "Open an ops ticket"
        description = "Files a ticket in the ops queue."
        arguments = {{ queue = "ops" }}
        [backends.rec.tools.overrides.echo]
        description = "Says it back."
        "#,
        backend.url
    )
}

#[tokio::test]
async fn curated_tools_appear_as_configured_and_call_the_original() {
    let backend = Backend::start().await;
    let gw = gateway(&toml(&backend)).await;
    let host = Host::new(&gw);
    let s = host.initialize(None).await;
    assert_eq!(
        host.tool_names(None, &s).await,
        ["rec__add", "rec__echo", "rec__open_ops_ticket"]
    );
    let list = host.rpc(None, &s, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let ticket = tools
        .iter()
        .find(|t| t["name"] == "rec__open_ops_ticket")
        .unwrap();
    assert_eq!(ticket["title"], "Open an ops ticket");
    assert_eq!(ticket["description"], "Files a ticket in the ops queue.");
    assert_eq!(
        ticket["inputSchema"],
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    );
    let echo = tools.iter().find(|t| t["name"] == "rec__echo").unwrap();
    assert_eq!(echo["description"], "Says it back.");

    let r = host
        .rpc(
            None,
            &s,
            "tools/call",
            json!({"name": "rec__open_ops_ticket",
            "arguments": {"text": "disk full", "queue": "sneaky"}}),
        )
        .await;
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    let seen: Value = serde_json::from_str(text).unwrap();
    assert_eq!(seen["tool"], "file_ticket");
    assert_eq!(
        seen["arguments"],
        json!({"text": "disk full", "queue": "ops"})
    );
    // The original and the excluded names do not exist for hosts.
    for hidden in ["rec__file_ticket", "rec__delete_all"] {
        let r = host
            .rpc(
                None,
                &s,
                "tools/call",
                json!({"name": hidden, "arguments": {}}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
    }
    let upstream: Vec<Value> = backend.calls().iter().map(|p| p["name"].clone()).collect();
    assert_eq!(upstream, [json!("file_ticket")]);
}

#[test]
fn curated_names_obey_the_name_rules() {
    let text = r#"
        [server]
        max_name_len = 32
        [backends.rec]
        type = "http"
        url = "http://127.0.0.1:1/mcp"
        [backends.rec.tools.overrides.a]
        name = "bad name!"
        [backends.rec.tools.overrides.b]
        name = "a_name_that_is_far_too_long_for_32"
        [backends.rec.tools.overrides.c]
        name = "same"
        [backends.rec.tools.overrides.d]
        name = "same"
    "#;
    let problems = Config::parse(text, Path::new("c.toml"), &|_| None).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "backends.rec.tools.overrides.a.name",
        "backends.rec.tools.overrides.b.name",
        "backends.rec.tools.overrides.d.name",
    ] {
        assert!(paths.contains(&want), "missing {want} in {problems:?}");
    }
}
