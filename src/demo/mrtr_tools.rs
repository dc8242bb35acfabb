//! The tools and the prompt the 2026-07-28 server scenarios of the conformance
//! suite (`@modelcontextprotocol/conformance` 0.2.0-alpha.12: `server-stateless`,
//! `input-required-result-*`) call, by the names and with the input keys their
//! sources give.
//!
//! Each asks through [`CallContext::input`], so it works in both eras: on a
//! stateless request an ask is an MRTR round (`input_required` with that key, the
//! answer from the retry's `inputResponses`), on a session a server→client request.

use mcpgate::jsonrpc::ErrorObject;
use mcpgate::mcp::{LogLevel, Method};
use serde_json::{Map, Value, json};

use crate::demo::catalog::{DemoCatalog, Prompt, Tool, text_result};
use crate::demo::context::CallContext;

fn tool(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": {} }
    })
}

/// An `elicitation/create` (form mode) for one field of `kind`.
fn form(message: &str, field: &str, kind: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": { field: { "type": kind } },
            "required": [field]
        }
    })
}

/// A `sampling/createMessage` with one user message.
fn sampling(text: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
        "maxTokens": max_tokens
    })
}

/// The accepted form field `field` of an `ElicitResult`, if any.
fn accepted<'a>(answer: &'a Value, field: &str) -> Option<&'a Value> {
    (answer["action"] == "accept")
        .then(|| answer["content"].get(field))
        .flatten()
}

/// The text of a `CreateMessageResult`.
fn sampled(answer: &Value) -> &str {
    match &answer["content"] {
        Value::Array(blocks) => blocks.iter().find_map(|b| b["text"].as_str()),
        block => block["text"].as_str(),
    }
    .unwrap_or("")
}

/// The URIs of a `ListRootsResult`.
fn root_uris(answer: &Value) -> Vec<&str> {
    answer["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uri"].as_str())
        .collect()
}

async fn ask_name(ctx: &CallContext, key: &str, message: &str) -> Result<String, ErrorObject> {
    let answer = ctx
        .input(
            key,
            Method::ElicitationCreate,
            form(message, "name", "string"),
        )
        .await?;
    Ok(accepted(&answer, "name")
        .and_then(Value::as_str)
        .unwrap_or("stranger")
        .to_owned())
}

/// "state-ok" once a confirmation came back with a `requestState` that verified
/// (stateless), or from the client on a session (no state there).
async fn confirm(ctx: &CallContext) -> Result<Value, ErrorObject> {
    let answer = ctx
        .input(
            "confirm",
            Method::ElicitationCreate,
            form("Please confirm", "ok", "boolean"),
        )
        .await?;
    let ok = accepted(&answer, "ok")
        .cloned()
        .unwrap_or(Value::Bool(false));
    let state = if ctx.state_verified() || !ctx.is_stateless() {
        "state-ok"
    } else {
        "no requestState came back"
    };
    Ok(text_result(format!("Confirmed ok={ok}: {state}")))
}

/// Adds the tools and the prompt to `catalog`.
pub(crate) fn add(catalog: DemoCatalog) -> DemoCatalog {
    let mut catalog = catalog.with_prompt(prompt());
    for t in stateless_tools().into_iter().chain(input_tools()) {
        catalog = catalog.with_tool(t);
    }
    catalog
}

/// `server-stateless`'s diagnostic tools.
fn stateless_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            tool(
                "test_missing_capability",
                "Needs sampling: without it -32021.",
            ),
            |_, ctx: CallContext| async move {
                let answer = ctx
                    .input(
                        "answer",
                        Method::SamplingCreateMessage,
                        sampling("Say hi", 20),
                    )
                    .await?;
                Ok(text_result(format!("Sampled: {}", sampled(&answer))))
            },
        ),
        Tool::new(
            tool(
                "test_streaming_elicitation",
                "Asks for a name while its response streams (never a request on a stateless stream).",
            ),
            |_, ctx: CallContext| async move {
                ctx.progress(0.0, Some(1.0), Some("asking"));
                let name = ask_name(&ctx, "user_name", "What is your name?").await?;
                Ok(text_result(format!("Hello, {name}!")))
            },
        ),
        Tool::new(
            tool(
                "test_logging_tool",
                "Logs three info messages: only with a log level at or below info.",
            ),
            |_, ctx: CallContext| async move {
                for step in ["started", "working", "done"] {
                    ctx.log(
                        LogLevel::Info,
                        Some("demo"),
                        json!(format!("Logging tool {step}")),
                    );
                }
                Ok(text_result("Logged three messages"))
            },
        ),
        Tool::new(
            tool(
                "test_trigger_tool_change",
                "Adds or removes the tool test_dynamic_tool (tools list_changed).",
            ),
            |_, ctx: CallContext| async move {
                let server = ctx.server();
                let on = server.catalog().tool("test_dynamic_tool").is_none();
                server.update_catalog(|c| {
                    if on {
                        c.add_tool(Tool::new(
                            tool("test_dynamic_tool", "Present every other trigger."),
                            |_, _| async { Ok(text_result("dynamic")) },
                        ));
                    } else {
                        c.remove_tool("test_dynamic_tool");
                    }
                });
                Ok(text_result(format!("test_dynamic_tool present: {on}")))
            },
        ),
        Tool::new(
            tool(
                "test_trigger_prompt_change",
                "Adds or removes the prompt test_dynamic_prompt (prompts list_changed).",
            ),
            |_, ctx: CallContext| async move {
                let server = ctx.server();
                let on = server.catalog().prompt("test_dynamic_prompt").is_none();
                server.update_catalog(|c| {
                    if on {
                        c.add_prompt(Prompt::new(
                            json!({ "name": "test_dynamic_prompt", "description": "Present every other trigger." }),
                            |_, _| async { Ok(json!({ "messages": [] })) },
                        ));
                    } else {
                        c.remove_prompt("test_dynamic_prompt");
                    }
                });
                Ok(text_result(format!("test_dynamic_prompt present: {on}")))
            },
        ),
    ]
}

/// The `input-required-result-*` scenarios' tools.
fn input_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            tool(
                "test_input_required_result_elicitation",
                "Asks for a name (key user_name).",
            ),
            |_, ctx: CallContext| async move {
                let name = ask_name(&ctx, "user_name", "What is your name?").await?;
                Ok(text_result(format!("Hello, {name}!")))
            },
        ),
        Tool::new(
            tool(
                "test_input_required_result_sampling",
                "Asks the LLM (key capital_question).",
            ),
            |_, ctx: CallContext| async move {
                let question = sampling("What is the capital of France?", 100);
                let answer = ctx
                    .input("capital_question", Method::SamplingCreateMessage, question)
                    .await?;
                Ok(text_result(format!("The LLM said: {}", sampled(&answer))))
            },
        ),
        Tool::new(
            tool(
                "test_input_required_result_list_roots",
                "Asks for the roots (key client_roots).",
            ),
            |_, ctx: CallContext| async move {
                let answer = ctx
                    .input("client_roots", Method::RootsList, json!({}))
                    .await?;
                Ok(text_result(format!(
                    "Client roots: {}",
                    root_uris(&answer).join(", ")
                )))
            },
        ),
        Tool::new(
            tool(
                "test_input_required_result_request_state",
                "Asks for a confirmation (key confirm); says state-ok when requestState came back.",
            ),
            |_, ctx: CallContext| async move { confirm(&ctx).await },
        ),
        Tool::new(
            tool(
                "test_input_required_result_tampered_state",
                "As the request_state tool: a tampered requestState is refused (-32602).",
            ),
            |_, ctx: CallContext| async move { confirm(&ctx).await },
        ),
        Tool::new(
            tool(
                "test_input_required_result_multiple_inputs",
                "Asks for a name, a greeting and the roots in one round.",
            ),
            |_, ctx: CallContext| async move {
                let (name, greeting, roots) = tokio::join!(
                    ask_name(&ctx, "user_name", "What is your name?"),
                    ctx.input(
                        "greeting",
                        Method::SamplingCreateMessage,
                        sampling("Generate a greeting", 50)
                    ),
                    ctx.input("client_roots", Method::RootsList, json!({})),
                );
                let (name, greeting, roots) = (name?, greeting?, roots?);
                Ok(text_result(format!(
                    "{} {name}! Roots: {}",
                    sampled(&greeting),
                    root_uris(&roots).join(", ")
                )))
            },
        ),
        Tool::new(
            tool(
                "test_input_required_result_multi_round",
                "Asks for a name (step1), then a colour (step2): three rounds.",
            ),
            |_, ctx: CallContext| async move {
                let name = ask_name(&ctx, "step1", "Step 1: What is your name?").await?;
                let color = ctx
                    .input(
                        "step2",
                        Method::ElicitationCreate,
                        form("Step 2: What is your favorite color?", "color", "string"),
                    )
                    .await?;
                let color = accepted(&color, "color")
                    .and_then(Value::as_str)
                    .unwrap_or("none");
                Ok(text_result(format!("{name} likes {color}")))
            },
        ),
        Tool::new(
            tool(
                "test_input_required_result_capabilities",
                "Asks only for what the request declared: sampling and/or elicitation.",
            ),
            |_, ctx: CallContext| async move {
                let mut parts = Vec::new();
                if ctx.declares("sampling") || !ctx.declares("elicitation") {
                    let a = ctx
                        .input("llm", Method::SamplingCreateMessage, sampling("Say hi", 20))
                        .await?;
                    parts.push(format!("sampled {:?}", sampled(&a)));
                }
                if ctx.declares("elicitation") {
                    parts.push(format!(
                        "name {}",
                        ask_name(&ctx, "user_name", "Your name?").await?
                    ));
                }
                Ok(text_result(parts.join(", ")))
            },
        ),
    ]
}

/// `test_input_required_result_prompt`: `prompts/get` that asks for context
/// (key user_context).
fn prompt() -> Prompt {
    Prompt::new(
        json!({
            "name": "test_input_required_result_prompt",
            "description": "Asks the user what context the prompt should use."
        }),
        |_: Map<String, Value>, ctx: CallContext| async move {
            let answer = ctx
                .input(
                    "user_context",
                    Method::ElicitationCreate,
                    form("What context should the prompt use?", "context", "string"),
                )
                .await?;
            let context = accepted(&answer, "context")
                .and_then(Value::as_str)
                .unwrap_or("none");
            Ok(json!({
                "description": "A prompt built from the user's context",
                "messages": [{
                    "role": "user",
                    "content": { "type": "text", "text": format!("Use this context: {context}") }
                }]
            }))
        },
    )
}
