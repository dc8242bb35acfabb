//! `rmcp-client URL MODE TOOL ARGS_JSON URI PROMPT`
//!
//! Connects to the Streamable HTTP endpoint `URL` with rmcp's lifecycle `MODE`
//! (`initialize`: the legacy handshake, what `serve()` does; `auto`:
//! `ClientLifecycleMode::Auto`, probe `server/discover` then fall back;
//! `discover`: `ClientLifecycleMode::Discover`, modern only, no fallback), then
//! lists the tools, calls `TOOL` with the JSON object `ARGS_JSON`, reads `URI`
//! and gets the prompt `PROMPT`. Prints one JSON object on stdout: the summary
//! (exit 0) or `{"error": ..., "stage": ...}` (exit 1). Usage errors exit 2.

use std::process::ExitCode;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, ProtocolVersion, ReadResourceRequestParams,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

/// Upper bound for the whole run; the caller has its own timeout too.
const OVERALL: Duration = Duration::from_secs(30);

fn lifecycle(mode: &str) -> Option<ClientLifecycleMode> {
    Some(match mode {
        "initialize" => ClientLifecycleMode::Initialize,
        "auto" => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: None,
        },
        "discover" => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        _ => return None,
    })
}

/// A failed stage as the JSON the test reads.
fn failed(stage: &str, error: impl std::fmt::Debug) -> Value {
    json!({"stage": stage, "error": format!("{error:?}")})
}

async fn run(
    url: String,
    mode: ClientLifecycleMode,
    tool: String,
    args: serde_json::Map<String, Value>,
    uri: String,
    prompt: String,
) -> Result<Value, Value> {
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client = ().serve_with_lifecycle(transport, mode).await.map_err(|e| failed("connect", e))?;
    let info = client
        .peer_info()
        .ok_or_else(|| failed("connect", "no peer info"))?;
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| failed("tools/list", e))?;
    let called = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .map_err(|e| failed("tools/call", e))?;
    let read = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map_err(|e| failed("resources/read", e))?;
    let got = client
        .get_prompt(GetPromptRequestParams::new(prompt))
        .await
        .map_err(|e| failed("prompts/get", e))?;
    let summary = json!({
        "protocolVersion": info.protocol_version.to_string(),
        "server": info.server_info.as_ref().map(|i| i.name.clone()),
        "tools": tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>(),
        "call": serde_json::to_value(&called).unwrap_or(Value::Null),
        "read": serde_json::to_value(&read).unwrap_or(Value::Null),
        "prompt": serde_json::to_value(&got).unwrap_or(Value::Null),
    });
    let _ = client.cancel().await;
    Ok(summary)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let [url, mode, tool, args, uri, prompt] = <[String; 6]>::try_from(argv).unwrap_or_else(|_| {
        eprintln!("usage: rmcp-client URL initialize|auto|discover TOOL ARGS_JSON URI PROMPT");
        std::process::exit(2)
    });
    let Some(lifecycle) = lifecycle(&mode) else {
        eprintln!("unknown mode {mode:?}: initialize, auto or discover");
        return ExitCode::from(2);
    };
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&args) else {
        eprintln!("ARGS_JSON must be a JSON object: {args}");
        return ExitCode::from(2);
    };
    let outcome = tokio::time::timeout(OVERALL, run(url, lifecycle, tool, args, uri, prompt))
        .await
        .unwrap_or_else(|_| Err(failed("timeout", OVERALL)));
    let (mut out, code) = match outcome {
        Ok(v) => (v, ExitCode::SUCCESS),
        Err(v) => (v, ExitCode::FAILURE),
    };
    out["mode"] = mode.into();
    println!("{out}");
    code
}
