//! The fake backends' shared MCP behaviour: tool, resource and prompt catalogue and
//! what each tool does. Transport-neutral: a [`Peer`] sends related messages and
//! server→client requests. Deliberately independent of the gateway's own modules,
//! so the fakes can misbehave in ways the gateway must survive.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What a tool may do besides answering: send related messages and ask the client.
pub trait Peer: Send + Sync {
    /// Sends a notification related to the current request.
    fn notify(&self, method: &str, params: Value);
    /// Sends a server→client request and waits for the answer (`Ok(result)` or
    /// `Err(error object)`).
    fn ask(&self, method: &str, params: Value)
    -> impl Future<Output = Result<Value, Value>> + Send;
}

/// Server-wide state shared by every connection of one fake backend.
#[derive(Default)]
pub struct Catalog {
    /// Tools added at run time with `add_tool`, and raw extra tools.
    pub extra_tools: Mutex<Vec<Value>>,
    /// A label that `whoami` returns (tells backends apart in tests).
    pub label: String,
}

impl Catalog {
    /// A catalogue labelled `label` with `extra` raw tool definitions.
    pub fn new(label: &str, extra: Vec<Value>) -> Arc<Catalog> {
        Arc::new(Catalog {
            extra_tools: Mutex::new(extra),
            label: label.to_owned(),
        })
    }

    /// Every tool, built-in first.
    pub fn tools(&self) -> Vec<Value> {
        let obj = |props: Value| json!({"type": "object", "properties": props});
        let num = json!({"type": "number"});
        let s = json!({"type": "string"});
        let mut out = vec![
            json!({"name": "echo", "description": "Echo text", "inputSchema": obj(json!({"text": s}))}),
            json!({"name": "delay_echo", "inputSchema": obj(json!({"ms": num, "tag": s}))}),
            json!({"name": "slow_progress", "inputSchema": obj(json!({"n": num, "interval_ms": num}))}),
            json!({"name": "sleep", "inputSchema": obj(json!({"s": num}))}),
            json!({"name": "slow_task", "inputSchema": obj(json!({"s": num}))}),
            json!({"name": "big", "inputSchema": obj(json!({"bytes": num}))}),
            json!({"name": "spam_stderr", "inputSchema": obj(json!({"bytes": num}))}),
            json!({"name": "log", "inputSchema": obj(json!({"level": s, "text": s}))}),
            json!({"name": "add_tool", "inputSchema": obj(json!({"name": s}))}),
            json!({"name": "ask_sampling", "inputSchema": obj(json!({"text": s, "delay_ms": num}))}),
            json!({"name": "ask_elicit", "inputSchema": obj(json!({}))}),
            json!({"name": "ask_roots", "inputSchema": obj(json!({}))}),
            json!({"name": "links", "inputSchema": obj(json!({}))}),
            json!({"name": "whoami", "inputSchema": obj(json!({}))}),
        ];
        if let Ok(extra) = self.extra_tools.lock() {
            out.extend(extra.iter().cloned());
        }
        out
    }

    /// Whether `name` is an extra (raw or added) tool.
    fn is_extra(&self, name: &str) -> bool {
        self.extra_tools.lock().is_ok_and(|t| {
            t.iter()
                .any(|x| x.get("name").and_then(Value::as_str) == Some(name))
        })
    }
}

/// Concrete resources.
pub fn resources() -> Vec<Value> {
    vec![json!({"uri": "fx://static", "name": "static", "mimeType": "text/plain"})]
}

/// Resource templates.
pub fn templates() -> Vec<Value> {
    vec![json!({"uriTemplate": "fx://item/{id}", "name": "item", "mimeType": "text/plain"})]
}

/// Prompts.
pub fn prompts() -> Vec<Value> {
    vec![json!({"name": "greet", "arguments": [{"name": "name", "required": true}]})]
}

/// Server capabilities.
pub fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {},
        "prompts": {},
        "logging": {},
    })
}

/// One page of `items` (`page_size` 0 = everything) for an opaque cursor.
pub fn page(items: &[Value], key: &str, cursor: Option<&str>, page_size: usize) -> Value {
    if page_size == 0 {
        return json!({ key: items });
    }
    let start: usize = cursor
        .and_then(|c| c.strip_prefix("fx-page-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let end = (start + page_size).min(items.len());
    let mut out = json!({ key: items.get(start..end).unwrap_or_default() });
    if end < items.len() {
        out["nextCursor"] = format!("fx-page-{end}").into();
    }
    out
}

/// The answer to one of the four paginated lists (`tools/list`,
/// `resources/list`, `resources/templates/list`, `prompts/list`; MCP 2025-11-25
/// server/utilities/pagination) in pages of `page_size` (0: all at once); `None`
/// for any other method.
pub fn list(
    catalog: &Catalog,
    method: &str,
    cursor: Option<&str>,
    page_size: usize,
) -> Option<Value> {
    let (items, key) = match method {
        "tools/list" => (catalog.tools(), "tools"),
        "resources/list" => (resources(), "resources"),
        "resources/templates/list" => (templates(), "resourceTemplates"),
        "prompts/list" => (prompts(), "prompts"),
        _ => return None,
    };
    Some(page(&items, key, cursor, page_size))
}

/// A JSON-RPC response to `id`: `{result}`, or `{error: {code, message}}`.
pub fn response(id: &Value, outcome: Result<Value, (i64, String)>) -> Value {
    response_with(
        id,
        outcome.map_err(|(code, message)| json!({"code": code, "message": message})),
    )
}

/// A JSON-RPC response to `id` whose error is a whole error object (with `data`).
pub fn response_with(id: &Value, outcome: Result<Value, Value>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

/// A JSON-RPC request (server→client) or, with no `id`, a notification;
/// `params: Value::Null` leaves `params` out.
pub fn message(id: Option<i64>, method: &str, params: Value) -> Value {
    let mut m = match id {
        Some(id) => json!({"jsonrpc": "2.0", "id": id, "method": method}),
        None => json!({"jsonrpc": "2.0", "method": method}),
    };
    if !params.is_null() {
        m["params"] = params;
    }
    m
}

/// `resources/read`: `Err((code, message))` for an unknown URI.
pub fn read_resource(uri: &str) -> Result<Value, (i64, String)> {
    let text = if uri == "fx://static" {
        "static content".to_owned()
    } else if let Some(id) = uri.strip_prefix("fx://item/") {
        format!("item {id}")
    } else {
        return Err((-32002, "Resource not found".into()));
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
}

/// `prompts/get`.
pub fn get_prompt(params: &Value) -> Result<Value, (i64, String)> {
    if params.get("name").and_then(Value::as_str) != Some("greet") {
        return Err((-32602, "Unknown prompt".into()));
    }
    let who = params
        .pointer("/arguments/name")
        .and_then(Value::as_str)
        .unwrap_or("world");
    Ok(json!({"messages": [
        {"role": "user", "content": {"type": "text", "text": format!("Hello, {who}!")}},
        {"role": "user", "content": {"type": "resource", "resource": {"uri": "fx://item/9", "text": "item 9"}}},
        {"role": "user", "content": {"type": "resource_link", "uri": "fx://static", "name": "static",
            "title": "Static", "icons": [{"src": "https://fx.example/i.png"}],
            "annotations": {"audience": ["user"], "lastModified": "2025-01-01T00:00:00Z"}}}
    ]}))
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

fn arg_f64(args: &Value, key: &str, default: f64) -> f64 {
    args.get(key).and_then(Value::as_f64).unwrap_or(default)
}

/// Runs tool `name`. `Err((code, message))` becomes a JSON-RPC error.
pub async fn call_tool<P: Peer>(
    catalog: &Catalog,
    peer: &P,
    params: &Value,
) -> Result<Value, (i64, String)> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let token = params.pointer("/_meta/progressToken").cloned();
    match name {
        "echo" => Ok(text(
            args.get("text").and_then(Value::as_str).unwrap_or_default(),
        )),
        "delay_echo" => {
            let ms = arg_f64(&args, "ms", 0.0) as u64;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(text(args.get("tag").and_then(Value::as_str).unwrap_or_default()))
        }
        "slow_progress" => {
            let n = arg_f64(&args, "n", 3.0) as u64;
            let every = arg_f64(&args, "interval_ms", 10.0) as u64;
            for i in 1..=n {
                if let Some(t) = &token {
                    peer.notify(
                        "notifications/progress",
                        json!({"progressToken": t, "progress": i, "total": n}),
                    );
                }
                if every > 0 {
                    tokio::time::sleep(Duration::from_millis(every)).await;
                } else {
                    tokio::task::yield_now().await; // a flood, but others get answers
                }
            }
            Ok(text(format!("progressed {n}")))
        }
        "sleep" | "slow_task" | "task_sleep" => {
            let s = arg_f64(&args, "s", 1.0);
            tokio::time::sleep(Duration::from_secs_f64(s)).await;
            Ok(text("slept"))
        }
        "big" => Ok(text("x".repeat(arg_f64(&args, "bytes", 0.0) as usize))),
        "spam_stderr" => {
            use std::io::Write;
            let n = arg_f64(&args, "bytes", 0.0) as usize;
            let line = "e".repeat(99) + "\n";
            let mut err = std::io::stderr().lock();
            for _ in 0..n / 100 + 1 {
                let _ = err.write_all(line.as_bytes());
            }
            Ok(text("spammed"))
        }
        "log" => {
            peer.notify(
                "notifications/message",
                json!({"level": args.get("level").cloned().unwrap_or("info".into()),
                       "logger": "fx", "data": args.get("text").cloned().unwrap_or_default()}),
            );
            Ok(text("logged"))
        }
        "add_tool" => {
            let new = args.get("name").and_then(Value::as_str).unwrap_or("extra");
            if let Ok(mut t) = catalog.extra_tools.lock() {
                t.push(json!({"name": new, "inputSchema": {"type": "object"}}));
            }
            peer.notify("notifications/tools/list_changed", json!({}));
            Ok(text(format!("added {new}")))
        }
        "ask_sampling" => {
            // `delay_ms` first (so calls of several clients overlap), then the
            // question: `text`, default "2+2?".
            let ms = arg_f64(&args, "delay_ms", 0.0) as u64;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let q = args.get("text").and_then(Value::as_str).unwrap_or("2+2?");
            Ok(asked(
                peer.ask(
                    "sampling/createMessage",
                    json!({"messages": [{"role": "user", "content": {"type": "text", "text": q}}],
                           "maxTokens": 10}),
                )
                .await,
            ))
        }
        "ask_elicit" => Ok(asked(
            peer.ask(
                "elicitation/create",
                json!({"mode": "form", "message": "Pick x",
                       "requestedSchema": {"type": "object", "properties": {"x": {"type": "number"}}}}),
            )
            .await,
        )),
        "ask_roots" => Ok(asked(peer.ask("roots/list", json!({})).await)),
        "links" => Ok(links(arg_f64(&args, "pad", 0.0) as usize)),
        "whoami" => Ok(text(catalog.label.clone())),
        other if catalog.is_extra(other) => Ok(text(format!("called {other}"))),
        other => Err((-32602, format!("Unknown tool: {other}"))),
    }
}

/// The `links` tool's result: a resource link, an embedded resource and an MCP
/// Apps `resourceUri`; with `pad` > 0 also a text block of `pad` bytes that
/// quotes a resource link (not one: it is text) and an embedded text of `pad`
/// bytes.
fn links(pad: usize) -> Value {
    if pad == 0 {
        return json!({"content": [
            {"type": "resource_link", "uri": "fx://static", "name": "static"},
            {"type": "resource", "resource": {"uri": "fx://item/7", "text": "item 7"}}
        ], "_meta": {"ui": {"resourceUri": "fx://item/8"}}});
    }
    let quoted = r#"{"type": "resource_link", "uri": "fx://in-text"} é \ "#;
    let said: String = quoted.chars().cycle().take(pad).collect();
    json!({"content": [
        {"type": "text", "text": said},
        {"type": "resource_link", "uri": "fx://static", "name": "static"},
        {"type": "resource", "resource": {"uri": "fx://item/7", "text": "7".repeat(pad)}}
    ], "_meta": {"ui": {"resourceUri": "fx://item/8"}}})
}

/// A server→client answer as tool text: `answer: {json}` or `error: {json}`.
fn asked(r: Result<Value, Value>) -> Value {
    match r {
        Ok(v) => text(format!("answer: {v}")),
        Err(e) => {
            json!({"content": [{"type": "text", "text": format!("error: {e}")}], "isError": true})
        }
    }
}
