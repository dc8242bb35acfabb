//! The demo server's resources, resource templates, prompts and completions.
//!
//! `test://…` resources and `test_*` prompts follow the server scenarios of
//! `@modelcontextprotocol/conformance` 0.1.16; the `demo://…` ones are for people.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use crate::demo::catalog::{
    CompletionRef, CompletionRequest, Prompt, ReadRequest, Resource, ResourceTemplate,
    blob_contents, text_contents,
};
use crate::demo::context::CallContext;
use crate::demo::media;
use crate::demo::tools::red_pixel_base64;
use mcpgate::jsonrpc::ErrorObject;

const README: &str = "# mcpgate demo server\n\n\
This server exists to exercise MCP clients and gateways. Try:\n\n\
- `echo`, `add` (structured output), `color_swatch` (images), `fail` (tool errors)\n\
- `countdown` (progress + log notifications, cancellable)\n\
- `ask_llm` (sampling), `ask_user` (elicitation), `list_roots` (roots)\n\
- `toggle_bonus` (list_changed), `bump_counter` (subscribe to `demo://counter`)\n\
- resources `demo://readme`, `demo://logo.png`, `demo://counter`, template `demo://greeting/{name}`\n\
- prompts `greeting` (with completions) and `summarize_readme` (embedded resource)\n";

const NAMES: [&str; 6] = ["Ada", "Alan", "Barbara", "Edsger", "Grace", "Linus"];
const STYLES: [&str; 3] = ["casual", "formal", "pirate"];

fn resource(uri: &str, name: &str, description: &str, mime_type: &str) -> Value {
    json!({ "uri": uri, "name": name, "description": description, "mimeType": mime_type })
}

fn static_text(
    uri: &'static str,
    mime: &'static str,
    text: &'static str,
) -> impl Fn(ReadRequest, CallContext) -> std::future::Ready<Result<Value, ErrorObject>>
+ Send
+ Sync
+ 'static {
    move |_, _| std::future::ready(Ok(text_contents(uri, mime, text)))
}

/// Direct resources, in listing order.
pub(crate) fn resources(counter: &Arc<AtomicU64>) -> Vec<Resource> {
    let counter = counter.clone();
    vec![
        Resource::new(
            resource(
                "test://static-text",
                "static-text",
                "A static text resource",
                "text/plain",
            ),
            static_text(
                "test://static-text",
                "text/plain",
                "This is the content of the static text resource.",
            ),
        ),
        Resource::new(
            resource(
                "test://static-binary",
                "static-binary",
                "A 1x1 PNG image",
                "image/png",
            ),
            |_, _| async {
                Ok(blob_contents(
                    "test://static-binary",
                    "image/png",
                    &media::solid_png(1, 1, [0xff, 0, 0]),
                ))
            },
        ),
        Resource::new(
            resource(
                "test://watched-resource",
                "watched-resource",
                "A resource clients may subscribe to",
                "text/plain",
            ),
            static_text(
                "test://watched-resource",
                "text/plain",
                "Watched resource content",
            ),
        ),
        Resource::new(
            resource(
                "demo://readme",
                "readme",
                "What this demo server offers",
                "text/markdown",
            ),
            static_text("demo://readme", "text/markdown", README),
        ),
        Resource::new(
            resource(
                "demo://logo.png",
                "logo",
                "A 64x64 gradient PNG",
                "image/png",
            ),
            |_, _| async {
                let png = media::png(64, 64, |x, y| [(x * 4) as u8, (y * 4) as u8, 0x99]);
                Ok(blob_contents("demo://logo.png", "image/png", &png))
            },
        ),
        Resource::new(
            resource(
                "demo://counter",
                "counter",
                "A number that bump_counter increments (subscribe to it)",
                "text/plain",
            ),
            move |_, _| {
                let value = counter.load(Ordering::SeqCst);
                async move {
                    Ok(text_contents(
                        "demo://counter",
                        "text/plain",
                        value.to_string(),
                    ))
                }
            },
        ),
    ]
}

/// Resource templates, in listing order.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(
            json!({
                "uriTemplate": "test://template/{id}/data", "name": "template",
                "description": "JSON data for any id", "mimeType": "application/json"
            }),
            |req: ReadRequest, _| async move {
                let id = req.var("id").unwrap_or_default();
                let body =
                    json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
                Ok(text_contents(
                    &req.uri,
                    "application/json",
                    body.to_string(),
                ))
            },
        ),
        ResourceTemplate::new(
            json!({
                "uriTemplate": "demo://greeting/{name}", "name": "greeting",
                "description": "A greeting for anyone", "mimeType": "text/plain"
            }),
            |req: ReadRequest, _| async move {
                let name = req.var("name").unwrap_or_default();
                Ok(text_contents(
                    &req.uri,
                    "text/plain",
                    format!("Hello, {name}!"),
                ))
            },
        ),
    ]
}

fn arg(name: &str, description: &str, required: bool) -> Value {
    json!({ "name": name, "description": description, "required": required })
}

fn user_text(text: impl Into<String>) -> Value {
    json!({ "role": "user", "content": { "type": "text", "text": text.into() } })
}

fn arg_str<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// Prompts, in listing order.
pub(crate) fn prompts() -> Vec<Prompt> {
    vec![
        Prompt::new(
            json!({ "name": "test_simple_prompt", "description": "A prompt without arguments" }),
            |_, _| async {
                Ok(json!({ "messages": [user_text("This is a simple prompt for testing.")] }))
            },
        ),
        Prompt::new(
            json!({
                "name": "test_prompt_with_arguments",
                "description": "A prompt with two required arguments",
                "arguments": [arg("arg1", "First test argument", true), arg("arg2", "Second test argument", true)]
            }),
            |args: Map<String, Value>, _| async move {
                let text = format!(
                    "Prompt with arguments: arg1='{}', arg2='{}'",
                    arg_str(&args, "arg1"),
                    arg_str(&args, "arg2")
                );
                Ok(json!({ "messages": [user_text(text)] }))
            },
        ),
        Prompt::new(
            json!({
                "name": "test_prompt_with_embedded_resource",
                "description": "A prompt that embeds a resource",
                "arguments": [arg("resourceUri", "URI of the resource to embed", true)]
            }),
            |args: Map<String, Value>, _| async move {
                let uri = arg_str(&args, "resourceUri");
                Ok(json!({ "messages": [
                    { "role": "user", "content": { "type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."
                    }}},
                    user_text("Please process the embedded resource above.")
                ]}))
            },
        ),
        Prompt::new(
            json!({ "name": "test_prompt_with_image", "description": "A prompt with an image" }),
            |_, _| async {
                Ok(json!({ "messages": [
                    { "role": "user", "content": { "type": "image", "data": red_pixel_base64(), "mimeType": "image/png" } },
                    user_text("Please analyze the image above.")
                ]}))
            },
        ),
        Prompt::new(
            json!({
                "name": "greeting", "title": "Greeting",
                "description": "Asks for a greeting in a given style",
                "arguments": [arg("name", "Who to greet", true), arg("style", "casual, formal or pirate", false)]
            }),
            |args: Map<String, Value>, _| async move {
                let style = match arg_str(&args, "style") {
                    "" => "casual",
                    s => s,
                };
                let text = format!("Write a {style} greeting for {}.", arg_str(&args, "name"));
                Ok(json!({ "description": "A greeting request", "messages": [user_text(text)] }))
            },
        ),
        Prompt::new(
            json!({ "name": "summarize_readme", "description": "Asks to summarize demo://readme (embedded)" }),
            |_, _| async {
                Ok(json!({ "messages": [
                    { "role": "user", "content": { "type": "resource", "resource": {
                        "uri": "demo://readme", "mimeType": "text/markdown", "text": README
                    }}},
                    user_text("Summarize the document above in two sentences.")
                ]}))
            },
        ),
    ]
}

/// Completion candidates for prompt arguments and template variables.
pub(crate) fn complete(req: &CompletionRequest) -> Result<Vec<String>, ErrorObject> {
    let owned = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect();
    Ok(match (&req.reference, req.argument.as_str()) {
        (CompletionRef::Prompt(p), "arg1") if p == "test_prompt_with_arguments" => {
            owned(&["paris", "park", "party", "test-value"])
        }
        (CompletionRef::Prompt(p), "arg2") if p == "test_prompt_with_arguments" => {
            owned(&["alpha", "beta", "gamma"])
        }
        (CompletionRef::Prompt(p), "resourceUri") if p == "test_prompt_with_embedded_resource" => {
            owned(&[
                "test://static-text",
                "test://watched-resource",
                "demo://readme",
            ])
        }
        (CompletionRef::Prompt(p), "name") if p == "greeting" => owned(&NAMES),
        (CompletionRef::Prompt(p), "style") if p == "greeting" => owned(&STYLES),
        (CompletionRef::Resource(t), "id") if t == "test://template/{id}/data" => {
            owned(&["1", "2", "3", "42", "123"])
        }
        (CompletionRef::Resource(t), "name") if t == "demo://greeting/{name}" => owned(&NAMES),
        _ => Vec::new(),
    })
}

/// The resource added by `toggle_bonus`.
pub(crate) fn bonus_resource() -> Resource {
    Resource::new(
        resource(
            "demo://bonus",
            "bonus",
            "Present only while the bonus is on",
            "text/plain",
        ),
        static_text(
            "demo://bonus",
            "text/plain",
            "You found the bonus resource.",
        ),
    )
}

/// The prompt added by `toggle_bonus`.
pub(crate) fn bonus_prompt() -> Prompt {
    Prompt::new(
        json!({ "name": "bonus_prompt", "description": "Present only while the bonus is on" }),
        |_, _| async { Ok(json!({ "messages": [user_text("Tell me something surprising.")] })) },
    )
}
