//! The demo server's tools: the ones the MCP conformance suite calls, then friendly ones.
//!
//! Names, arguments and results of the `test_*` tools and `json_schema_2020_12_tool`
//! follow the server scenarios of `@modelcontextprotocol/conformance` 0.1.16.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mcpgate::mcp::{LogLevel, Method};
use serde_json::{Value, json};

use crate::demo::catalog::{Tool, error_result, text_result};
use crate::demo::content::{bonus_prompt, bonus_resource};
use crate::demo::context::CallContext;
use crate::demo::media::{self, COLORS};

/// The base64 1×1 red PNG used by the conformance tools and prompts.
pub(crate) fn red_pixel_base64() -> String {
    STANDARD.encode(media::solid_png(1, 1, [0xff, 0, 0]))
}

fn no_args() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

fn string_arg(name: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string", "description": description } },
        "required": [name]
    })
}

fn tool(name: &str, description: &str, input_schema: Value) -> Value {
    let mut definition = json!({ "name": name, "description": description });
    definition["inputSchema"] = input_schema;
    definition
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Every demo tool except the toggled bonus tool, in listing order.
pub(crate) fn all(counter: &Arc<AtomicU64>) -> Vec<Tool> {
    let mut tools = conformance();
    tools.extend(friendly(counter));
    tools
}

fn conformance() -> Vec<Tool> {
    vec![
        Tool::new(
            tool(
                "test_simple_text",
                "Returns a simple text block.",
                no_args(),
            ),
            |_, _| async { Ok(text_result("This is a simple text response for testing.")) },
        ),
        Tool::new(
            tool(
                "test_image_content",
                "Returns a 1x1 red PNG image.",
                no_args(),
            ),
            |_, _| async {
                Ok(json!({ "content": [
                    { "type": "image", "data": red_pixel_base64(), "mimeType": "image/png" }
                ]}))
            },
        ),
        Tool::new(
            tool("test_audio_content", "Returns a short WAV tone.", no_args()),
            |_, _| async {
                let data = STANDARD.encode(media::wav_tone(440.0, 50));
                Ok(
                    json!({ "content": [{ "type": "audio", "data": data, "mimeType": "audio/wav" }] }),
                )
            },
        ),
        Tool::new(
            tool(
                "test_embedded_resource",
                "Returns an embedded text resource.",
                no_args(),
            ),
            |_, _| async {
                Ok(json!({ "content": [{ "type": "resource", "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content."
                }}]}))
            },
        ),
        Tool::new(
            tool(
                "test_multiple_content_types",
                "Returns text, image and embedded resource blocks.",
                no_args(),
            ),
            |_, _| async {
                Ok(json!({ "content": [
                    { "type": "text", "text": "Multiple content types test:" },
                    { "type": "image", "data": red_pixel_base64(), "mimeType": "image/png" },
                    { "type": "resource", "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": json!({ "test": "data", "value": 123 }).to_string()
                    }}
                ]}))
            },
        ),
        Tool::new(
            tool(
                "test_tool_with_logging",
                "Sends three info log notifications while it runs.",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                let log = |text: &str| ctx.log(LogLevel::Info, Some("demo"), json!(text));
                log("Tool execution started");
                sleep_ms(50).await;
                log("Tool processing data");
                sleep_ms(50).await;
                log("Tool execution completed");
                Ok(text_result("Tool with logging executed successfully"))
            },
        ),
        Tool::new(
            tool(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100 when given a progress token.",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        sleep_ms(50).await;
                    }
                    let msg = format!("Completed step {step} of 100");
                    ctx.progress(step, Some(100.0), Some(&msg));
                }
                Ok(text_result("Tool with progress executed successfully"))
            },
        ),
        Tool::new(
            tool(
                "test_error_handling",
                "Always fails with an execution error.",
                no_args(),
            ),
            |_, _| async {
                Ok(error_result(
                    "This tool intentionally returns an error for testing",
                ))
            },
        ),
        Tool::new(
            tool(
                "test_sampling",
                "Asks the client's LLM to answer `prompt` (sampling/createMessage).",
                string_arg("prompt", "The prompt to send to the LLM"),
            ),
            |args: Value, ctx: CallContext| async move {
                let prompt = args["prompt"].as_str().unwrap_or_default().to_owned();
                Ok(match sample(&ctx, &prompt, None).await {
                    Ok(answer) => text_result(format!("LLM response: {answer}")),
                    Err(e) => error_result(format!("Sampling failed: {e}")),
                })
            },
        ),
        Tool::new(
            tool(
                "test_elicitation",
                "Asks the user for a username and email (elicitation/create).",
                string_arg("message", "The message to show the user"),
            ),
            |args: Value, ctx: CallContext| async move {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "username": { "type": "string", "description": "User's response" },
                        "email": { "type": "string", "description": "User's email address" }
                    },
                    "required": ["username", "email"]
                });
                let message = args["message"].as_str().unwrap_or_default();
                Ok(elicit(&ctx, message, schema, "User response").await)
            },
        ),
        Tool::new(
            tool(
                "test_elicitation_sep1034_defaults",
                "Elicits a form whose fields all carry defaults (SEP-1034).",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "name": { "type": "string", "description": "User name", "default": "John Doe" },
                        "age": { "type": "integer", "description": "User age", "default": 30 },
                        "score": { "type": "number", "description": "User score", "default": 95.5 },
                        "status": {
                            "type": "string", "description": "User status",
                            "enum": ["active", "inactive", "pending"], "default": "active"
                        },
                        "verified": { "type": "boolean", "description": "Verification status", "default": true }
                    },
                    "required": []
                });
                let message = "Please review and update the form fields with defaults";
                Ok(elicit(&ctx, message, schema, "Elicitation completed").await)
            },
        ),
        Tool::new(
            tool(
                "test_elicitation_sep1330_enums",
                "Elicits a form with all five enum schema variants (SEP-1330).",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                let titled = |prefix: &str, titles: [&str; 3]| -> Vec<Value> {
                    titles
                        .iter()
                        .enumerate()
                        .map(|(i, t)| json!({ "const": format!("{prefix}{}", i + 1), "title": t }))
                        .collect()
                };
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": {
                            "type": "string", "description": "Select one option",
                            "enum": ["option1", "option2", "option3"]
                        },
                        "titledSingle": {
                            "type": "string", "description": "Select one option with titles",
                            "oneOf": titled("value", ["First Option", "Second Option", "Third Option"])
                        },
                        "legacyEnum": {
                            "type": "string", "description": "Select one option (legacy)",
                            "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"]
                        },
                        "untitledMulti": {
                            "type": "array", "description": "Select multiple options",
                            "minItems": 1, "maxItems": 3,
                            "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
                        },
                        "titledMulti": {
                            "type": "array", "description": "Select multiple options with titles",
                            "minItems": 1, "maxItems": 3,
                            "items": { "anyOf": titled("value", ["First Choice", "Second Choice", "Third Choice"]) }
                        }
                    },
                    "required": []
                });
                let message = "Please select options from the enum fields";
                Ok(elicit(&ctx, message, schema, "Elicitation completed").await)
            },
        ),
        Tool::new(
            tool(
                "json_schema_2020_12_tool",
                "Tool with JSON Schema 2020-12 features ($schema, $defs, $ref) (SEP-1613).",
                json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "type": "object",
                            "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
                        }
                    },
                    "properties": {
                        "name": { "type": "string" },
                        "address": { "$ref": "#/$defs/address" }
                    },
                    "additionalProperties": false
                }),
            ),
            |args: Value, _| async move {
                Ok(text_result(format!(
                    "JSON Schema 2020-12 tool called with: {args}"
                )))
            },
        ),
        Tool::new(
            tool(
                "test_reconnection",
                "Closes its SSE stream mid-call and answers after the client reconnects with \
                 Last-Event-ID (SEP-1699). Over stdio it simply answers.",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                ctx.close_stream();
                sleep_ms(100).await;
                Ok(text_result(
                    "Reconnection test completed successfully. If you received this, \
                     the client properly reconnected after stream closure.",
                ))
            },
        ),
    ]
}

/// Sends `sampling/createMessage` with one user message and returns the reply text.
async fn sample(ctx: &CallContext, prompt: &str, system: Option<&str>) -> Result<String, String> {
    let mut params = json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": 100
    });
    if let Some(system) = system {
        params["systemPrompt"] = json!(system);
    }
    let reply = ctx
        .request(Method::SamplingCreateMessage, params)
        .await
        .map_err(|e| e.message)?;
    let text = match &reply["content"] {
        Value::Array(blocks) => blocks.iter().find_map(|b| b["text"].as_str()),
        block => block["text"].as_str(),
    };
    Ok(text.unwrap_or("(no text in the reply)").to_owned())
}

/// Sends a form-mode `elicitation/create` and describes the answer as a tool result.
async fn elicit(ctx: &CallContext, message: &str, schema: Value, label: &str) -> Value {
    let params = json!({ "message": message, "requestedSchema": schema });
    match ctx.request(Method::ElicitationCreate, params).await {
        Ok(answer) => {
            let action = answer["action"].as_str().unwrap_or("unknown");
            let content = answer.get("content").cloned().unwrap_or(json!({}));
            text_result(format!("{label}: action={action}, content={content}"))
        }
        Err(e) => error_result(format!("Elicitation failed: {}", e.message)),
    }
}

fn friendly(counter: &Arc<AtomicU64>) -> Vec<Tool> {
    let color_names: Vec<&str> = COLORS.iter().map(|(n, _)| *n).collect();
    let bump = counter.clone();
    vec![
        Tool::new(
            json!({
                "name": "echo", "title": "Echo",
                "description": "Returns the text it is given.",
                "inputSchema": string_arg("text", "Text to echo back"),
                "annotations": { "readOnlyHint": true, "openWorldHint": false }
            }),
            |args: Value, _| async move { Ok(text_result(args["text"].as_str().unwrap_or_default())) },
        ),
        Tool::new(
            json!({
                "name": "add", "title": "Add two numbers",
                "description": "Adds a and b; the sum is also returned as structured content.",
                "inputSchema": {
                    "type": "object",
                    "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
                    "required": ["a", "b"]
                },
                "outputSchema": {
                    "type": "object",
                    "properties": { "sum": { "type": "number" } },
                    "required": ["sum"]
                },
                "annotations": { "readOnlyHint": true, "idempotentHint": true, "openWorldHint": false }
            }),
            |args: Value, _| async move {
                let a = args["a"].as_f64().unwrap_or_default();
                let b = args["b"].as_f64().unwrap_or_default();
                let structured = json!({ "sum": a + b });
                Ok(json!({
                    "content": [{ "type": "text", "text": structured.to_string() }],
                    "structuredContent": structured
                }))
            },
        ),
        Tool::new(
            json!({
                "name": "color_swatch", "title": "Colour swatch",
                "description": "Returns a 32x32 PNG of a colour (a name or #rrggbb).",
                "inputSchema": {
                    "type": "object",
                    "properties": { "color": { "type": "string", "description": format!("One of {} or #rrggbb", color_names.join(", ")) } },
                    "required": ["color"]
                }
            }),
            |args: Value, _| async move {
                let name = args["color"].as_str().unwrap_or_default();
                let Some(rgb) = media::parse_color(name) else {
                    return Ok(error_result(format!("Unknown colour {name:?}")));
                };
                let data = STANDARD.encode(media::solid_png(32, 32, rgb));
                Ok(json!({ "content": [
                    { "type": "image", "data": data, "mimeType": "image/png" },
                    { "type": "text", "text": format!("A 32x32 swatch of {name}") }
                ]}))
            },
        ),
        Tool::new(
            tool(
                "fail",
                "Always fails with an execution error (isError: true) carrying the reason.",
                json!({ "type": "object", "properties": { "reason": { "type": "string" } } }),
            ),
            |args: Value, _| async move {
                let reason = args["reason"].as_str().unwrap_or("no reason given");
                Ok(error_result(format!(
                    "The tool failed as requested: {reason}"
                )))
            },
        ),
        Tool::new(
            tool(
                "countdown",
                "Counts down, sending a progress and a log notification per step. Cancellable.",
                json!({
                    "type": "object",
                    "properties": {
                        "steps": { "type": "integer", "minimum": 1, "maximum": 20, "default": 5 },
                        "delay_ms": { "type": "integer", "minimum": 0, "maximum": 5000, "default": 250 }
                    }
                }),
            ),
            |args: Value, ctx: CallContext| async move {
                let steps = args["steps"].as_u64().unwrap_or(5).clamp(1, 20);
                let delay = args["delay_ms"].as_u64().unwrap_or(250).min(5000);
                for done in 1..=steps {
                    sleep_ms(delay).await;
                    let left = steps - done;
                    ctx.progress(
                        done as f64,
                        Some(steps as f64),
                        Some(&format!("{left} to go")),
                    );
                    ctx.log(LogLevel::Info, Some("countdown"), json!(format!("{left}…")));
                }
                Ok(text_result(format!(
                    "Countdown finished after {steps} steps"
                )))
            },
        ),
        Tool::new(
            tool(
                "ask_llm",
                "Asks the client's LLM a question through sampling/createMessage.",
                string_arg("question", "What to ask"),
            ),
            |args: Value, ctx: CallContext| async move {
                let question = args["question"].as_str().unwrap_or_default().to_owned();
                Ok(
                    match sample(&ctx, &question, Some("Answer briefly.")).await {
                        Ok(answer) => text_result(answer),
                        Err(e) => error_result(format!("Sampling failed: {e}")),
                    },
                )
            },
        ),
        Tool::new(
            tool(
                "ask_user",
                "Asks the user a question through a form (elicitation/create).",
                string_arg("question", "What to ask the user"),
            ),
            |args: Value, ctx: CallContext| async move {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "answer": { "type": "string", "title": "Answer" },
                        "confident": { "type": "boolean", "title": "Are you sure?", "default": true }
                    },
                    "required": ["answer"]
                });
                let question = args["question"].as_str().unwrap_or_default();
                Ok(elicit(&ctx, question, schema, "The user answered").await)
            },
        ),
        Tool::new(
            tool(
                "list_roots",
                "Lists the client's roots (roots/list).",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                Ok(match ctx.request(Method::RootsList, json!({})).await {
                    Ok(roots) => text_result(format!("Client roots: {}", roots["roots"])),
                    Err(e) => error_result(format!("roots/list failed: {}", e.message)),
                })
            },
        ),
        Tool::new(
            tool(
                "toggle_bonus",
                "Adds or removes the bonus tool, resource and prompt; clients get list_changed.",
                no_args(),
            ),
            |_, ctx: CallContext| async move {
                let server = ctx.server();
                let on = server.catalog().tool("bonus_echo").is_none();
                server.update_catalog(|c| {
                    if on {
                        c.add_tool(bonus_tool());
                        c.add_resource(bonus_resource());
                        c.add_prompt(bonus_prompt());
                    } else {
                        c.remove_tool("bonus_echo");
                        c.remove_resource("demo://bonus");
                        c.remove_prompt("bonus_prompt");
                    }
                });
                Ok(text_result(if on {
                    "Bonus items added"
                } else {
                    "Bonus items removed"
                }))
            },
        ),
        Tool::new(
            tool(
                "bump_counter",
                "Increments demo://counter; subscribers get notifications/resources/updated.",
                no_args(),
            ),
            move |_, ctx: CallContext| {
                let counter = bump.clone();
                async move {
                    let value = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let notified = ctx.server().notify_resource_updated("demo://counter");
                    Ok(text_result(format!(
                        "Counter is now {value} ({notified} subscribed session(s) notified)"
                    )))
                }
            },
        ),
    ]
}

/// The tool added by `toggle_bonus`.
fn bonus_tool() -> Tool {
    Tool::new(
        tool(
            "bonus_echo",
            "Echoes text; present only while the bonus is on.",
            string_arg("text", "Text to echo"),
        ),
        |args: Value, _| async move {
            Ok(text_result(format!(
                "bonus: {}",
                args["text"].as_str().unwrap_or_default()
            )))
        },
    )
}
