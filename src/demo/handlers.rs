//! The MCP request methods, served from the session's [`DemoCatalog`](super::catalog::DemoCatalog).

use mcpgate::jsonrpc::{
    ErrorObject, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND,
};
use mcpgate::mcp::{ListKind, LogLevel, Method, ProtocolVersion};
use serde_json::{Map, Value, json};

use crate::demo::catalog::{
    CompletionRef, CompletionRequest, HandlerResult, completion_result, error_result,
};
use crate::demo::context::CallContext;
use crate::demo::{listen, modern};

/// Routes one request to its method. On a session, before `initialize` only
/// `initialize` and `ping` are served (MCP 2025-11-25 basic/lifecycle
/// "Initialization"); a stateless request needs no handshake and may also be
/// `server/discover` or `subscriptions/listen` (MCP 2026-07-28). A method whose
/// capability the server does not announce is not found.
pub(crate) async fn dispatch(
    ctx: CallContext,
    method: Method,
    params: Option<Value>,
) -> HandlerResult {
    let params = params.unwrap_or_else(|| json!({}));
    let stateless = ctx.is_stateless();
    if !stateless
        && !matches!(method, Method::Initialize | Method::Ping)
        && !ctx.session().is_initialized()
    {
        return Err(ErrorObject::new(
            INVALID_REQUEST,
            "Server not initialized: send initialize first",
        ));
    }
    let caps = ctx.server().capabilities().clone();
    let require = |cap: &str| {
        if caps.get(cap).is_some_and(Value::is_object) {
            Ok(())
        } else {
            Err(method_not_found(&method))
        }
    };
    match &method {
        Method::Initialize => initialize(&ctx, &params),
        Method::Ping => Ok(json!({})),
        Method::ToolsList => require("tools").and_then(|()| list(&ctx, ListKind::Tools, &params)),
        Method::ResourcesList => {
            require("resources").and_then(|()| list(&ctx, ListKind::Resources, &params))
        }
        Method::ResourcesTemplatesList => {
            require("resources").and_then(|()| list(&ctx, ListKind::Templates, &params))
        }
        Method::PromptsList => {
            require("prompts").and_then(|()| list(&ctx, ListKind::Prompts, &params))
        }
        Method::ToolsCall => {
            require("tools")?;
            call_tool(ctx, &params).await
        }
        Method::ResourcesRead => {
            require("resources")?;
            read_resource(ctx, &params).await
        }
        Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            if caps["resources"]["subscribe"] != Value::Bool(true) {
                return Err(method_not_found(&method));
            }
            subscribe(&ctx, &params, method == Method::ResourcesSubscribe)
        }
        Method::PromptsGet => {
            require("prompts")?;
            get_prompt(ctx, &params).await
        }
        Method::CompletionComplete => require("completions").and_then(|()| complete(&ctx, &params)),
        Method::LoggingSetLevel => require("logging").and_then(|()| set_level(&ctx, &params)),
        Method::ServerDiscover if stateless => Ok(modern::discover(&ctx.server())),
        Method::SubscriptionsListen if stateless => listen::listen(&ctx, &params).await,
        _ => Err(method_not_found(&method)),
    }
}

fn method_not_found(method: &Method) -> ErrorObject {
    ErrorObject::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
}

fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, message)
}

fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, ErrorObject> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("`{name}` must be a string")))
}

/// `initialize`: echo a supported version, else answer the latest (MCP 2025-11-25
/// basic/lifecycle "Version Negotiation").
fn initialize(ctx: &CallContext, params: &Value) -> HandlerResult {
    let version = ProtocolVersion::negotiate(str_param(params, "protocolVersion")?);
    {
        let mut state = ctx.session().state();
        if state.protocol_version.is_some() {
            return Err(ErrorObject::new(
                INVALID_REQUEST,
                "Session already initialized",
            ));
        }
        state.protocol_version = Some(version);
        state.client_capabilities = params.get("capabilities").cloned().unwrap_or(json!({}));
        state.client_info = params.get("clientInfo").cloned().unwrap_or(Value::Null);
    }
    let server = ctx.server();
    let info = server.info();
    let mut server_info = json!({ "name": info.name, "version": info.version });
    if let Some(title) = &info.title {
        server_info["title"] = json!(title);
    }
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": server.capabilities(),
        "serverInfo": server_info,
    });
    if let Some(instructions) = &info.instructions {
        result["instructions"] = json!(instructions);
    }
    Ok(result)
}

fn list(ctx: &CallContext, kind: ListKind, params: &Value) -> HandlerResult {
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.as_str()),
        Some(_) => return Err(invalid("`cursor` must be a string")),
    };
    ctx.server().catalog().list_page(kind, cursor)
}

/// `tools/call`. Unknown tool → `-32602`; arguments that do not fit the input schema
/// are an execution error (`isError: true`, MCP 2025-11-25 server/tools, SEP-1303).
async fn call_tool(ctx: CallContext, params: &Value) -> HandlerResult {
    let name = str_param(params, "name")?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(invalid("`arguments` must be an object")),
    };
    let Some(tool) = ctx.server().catalog().tool(name).cloned() else {
        return Err(invalid(format!("Unknown tool: {name}")));
    };
    if let Err(problem) = check_arguments(&tool.definition["inputSchema"], &args) {
        return Ok(error_result(format!(
            "Invalid arguments for {name}: {problem}"
        )));
    }
    tool.call(args, ctx).await
}

/// A shallow input check: `required` members, top-level `type`s and
/// `additionalProperties: false`. Deeper JSON Schema checks are left to the tool.
fn check_arguments(schema: &Value, args: &Value) -> Result<(), String> {
    let empty = Map::new();
    let args = args.as_object().unwrap_or(&empty);
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !args.contains_key(name) {
                return Err(format!("missing required argument `{name}`"));
            }
        }
    }
    for (key, value) in args {
        match props.and_then(|p| p.get(key)) {
            Some(prop) => {
                if let Some(ty) = prop.get("type") {
                    let allowed: Vec<&str> = match ty {
                        Value::String(t) => vec![t.as_str()],
                        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                        _ => Vec::new(),
                    };
                    if !allowed.is_empty() && !allowed.iter().any(|t| has_type(value, t)) {
                        return Err(format!("`{key}` must be of type {}", allowed.join(" or ")));
                    }
                }
            }
            None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return Err(format!("unexpected argument `{key}`"));
            }
            None => {}
        }
    }
    Ok(())
}

fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// `resources/read`: unknown URI → `-32002` with `data: {uri}` (MCP 2025-11-25
/// server/resources "Error Handling").
async fn read_resource(ctx: CallContext, params: &Value) -> HandlerResult {
    let uri = str_param(params, "uri")?.to_owned();
    let catalog = ctx.server().catalog();
    match catalog.read(&uri, ctx) {
        Some(fut) => fut.await,
        None => Err(not_found(&uri)),
    }
}

fn not_found(uri: &str) -> ErrorObject {
    ErrorObject::new(RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({ "uri": uri }))
}

fn subscribe(ctx: &CallContext, params: &Value, on: bool) -> HandlerResult {
    let uri = str_param(params, "uri")?;
    if on && !ctx.server().catalog().has_resource(uri) {
        return Err(not_found(uri));
    }
    let mut state = ctx.session().state();
    if on {
        state.subscriptions.insert(uri.to_owned());
    } else {
        state.subscriptions.remove(uri);
    }
    Ok(json!({}))
}

/// `prompts/get`: unknown prompt, non-string argument or missing required argument →
/// `-32602` (MCP 2025-11-25 server/prompts "Error Handling").
async fn get_prompt(ctx: CallContext, params: &Value) -> HandlerResult {
    let name = str_param(params, "name")?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("`arguments` must be an object")),
    };
    if let Some((k, _)) = args.iter().find(|(_, v)| !v.is_string()) {
        return Err(invalid(format!("argument `{k}` must be a string")));
    }
    let Some(prompt) = ctx.server().catalog().prompt(name).cloned() else {
        return Err(invalid(format!("Unknown prompt: {name}")));
    };
    let declared = prompt.definition["arguments"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for arg in declared {
        let arg_name = arg["name"].as_str().unwrap_or("");
        if arg["required"] == Value::Bool(true) && !args.contains_key(arg_name) {
            return Err(invalid(format!("Missing required argument: {arg_name}")));
        }
    }
    prompt.get(args, ctx).await
}

/// `completion/complete` for prompt arguments and template variables (MCP 2025-11-25
/// server/utilities/completion). An unknown prompt or template → `-32602`.
fn complete(ctx: &CallContext, params: &Value) -> HandlerResult {
    let reference = params
        .get("ref")
        .ok_or_else(|| invalid("`ref` is required"))?;
    let catalog = ctx.server().catalog();
    let reference = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let name = str_param(reference, "name")?;
            if catalog.prompt(name).is_none() {
                return Err(invalid(format!("Unknown prompt: {name}")));
            }
            CompletionRef::Prompt(name.to_owned())
        }
        Some("ref/resource") => {
            let uri = str_param(reference, "uri")?;
            if !catalog.has_template(uri) && !catalog.has_resource(uri) {
                return Err(invalid(format!("Unknown resource template: {uri}")));
            }
            CompletionRef::Resource(uri.to_owned())
        }
        _ => return Err(invalid("`ref.type` must be ref/prompt or ref/resource")),
    };
    let argument = params
        .get("argument")
        .ok_or_else(|| invalid("`argument` is required"))?;
    let req = CompletionRequest {
        reference,
        argument: str_param(argument, "name")?.to_owned(),
        value: str_param(argument, "value")?.to_owned(),
        context: params["context"]["arguments"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let candidates = catalog.complete(&req).transpose()?.unwrap_or_default();
    Ok(completion_result(candidates, &req.value))
}

/// `logging/setLevel`: an unknown level → `-32602` (MCP 2025-11-25 server/utilities/logging).
fn set_level(ctx: &CallContext, params: &Value) -> HandlerResult {
    let name = str_param(params, "level")?;
    let level =
        LogLevel::parse(name).ok_or_else(|| invalid(format!("unknown log level {name:?}")))?;
    ctx.session().state().log_level = Some(level);
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_arguments_shallowly() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "n": {"type": "integer"}, "s": {"type": ["string", "null"]}},
            "required": ["a"],
            "additionalProperties": false
        });
        assert!(check_arguments(&schema, &json!({"a": 1.5})).is_ok());
        assert!(check_arguments(&schema, &json!({"a": 1, "n": 2.0, "s": null})).is_ok());
        assert!(check_arguments(&schema, &json!({})).is_err());
        assert!(check_arguments(&schema, &json!({"a": "x"})).is_err());
        assert!(check_arguments(&schema, &json!({"a": 1, "n": 2.5})).is_err());
        assert!(check_arguments(&schema, &json!({"a": 1, "zzz": 1})).is_err());
        assert!(check_arguments(&json!({"type": "object"}), &json!({"anything": 1})).is_ok());
    }
}
