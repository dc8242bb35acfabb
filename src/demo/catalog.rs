//! Generic catalogue of tools, resources, resource templates and prompts with async handlers.
//!
//! A [`DemoCatalog`] is plain data plus handler closures; the protocol engine
//! ([`super::server`]) serves any catalogue. Definitions are kept as JSON values so that
//! every field a catalogue author writes (`title`, `icons`, `annotations`, `outputSchema`,
//! `$schema`, `_meta`, …) reaches the client unchanged (MCP 2025-11-25 server/tools,
//! server/resources, server/prompts).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use mcpgate::jsonrpc::{ErrorObject, INVALID_PARAMS};
use mcpgate::mcp::{Changed, ListKind};

use crate::demo::context::CallContext;
use crate::demo::uri_template::UriTemplate;

/// A boxed, sendable future, the return type of every handler.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler returns: a JSON result object, or a JSON-RPC protocol error.
pub type HandlerResult = Result<Value, ErrorObject>;

type ToolFn = dyn Fn(Value, CallContext) -> BoxFuture<HandlerResult> + Send + Sync;
type ReadFn = dyn Fn(ReadRequest, CallContext) -> BoxFuture<HandlerResult> + Send + Sync;
type PromptFn = dyn Fn(Map<String, Value>, CallContext) -> BoxFuture<HandlerResult> + Send + Sync;
/// A read handler and the template variables extracted from the URI.
type Resolved = (Arc<ReadFn>, Vec<(String, String)>);
type CompleteFn = dyn Fn(&CompletionRequest) -> Result<Vec<String>, ErrorObject> + Send + Sync;

/// A tool: its `Tool` definition (MCP 2025-11-25 server/tools) and its handler.
///
/// The handler gets the call's `arguments` object and returns a `CallToolResult`
/// (`{content, structuredContent?, isError?}`). Execution failures are results with
/// `isError: true` ([`error_result`]); an `Err` becomes a JSON-RPC error response.
#[derive(Clone)]
pub struct Tool {
    /// The `Tool` object exactly as listed by `tools/list`.
    pub definition: Value,
    handler: Arc<ToolFn>,
}

impl Tool {
    /// A tool from its definition (which must carry a string `name`) and handler.
    pub fn new<F, Fut>(definition: Value, handler: F) -> Self
    where
        F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Tool {
            definition,
            handler: Arc::new(move |args, ctx| Box::pin(handler(args, ctx))),
        }
    }

    /// The tool's name (`definition.name`).
    pub fn name(&self) -> &str {
        name_of(&self.definition, "name")
    }

    /// Runs the handler.
    pub fn call(&self, arguments: Value, ctx: CallContext) -> BoxFuture<HandlerResult> {
        (self.handler)(arguments, ctx)
    }
}

/// The parameters a resource handler receives.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRequest {
    /// The URI the client asked for.
    pub uri: String,
    /// Template variables (empty for a direct resource), e.g. `[("id", "123")]`.
    pub vars: Vec<(String, String)>,
}

impl ReadRequest {
    /// The value of template variable `name`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A direct resource (MCP 2025-11-25 server/resources): definition and read handler.
#[derive(Clone)]
pub struct Resource {
    /// The `Resource` object as listed by `resources/list` (must carry `uri`).
    pub definition: Value,
    handler: Arc<ReadFn>,
}

impl Resource {
    /// A resource from its definition and a handler returning `{contents: [...]}`.
    pub fn new<F, Fut>(definition: Value, handler: F) -> Self
    where
        F: Fn(ReadRequest, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Resource {
            definition,
            handler: Arc::new(move |req, ctx| Box::pin(handler(req, ctx))),
        }
    }

    /// The resource URI (`definition.uri`).
    pub fn uri(&self) -> &str {
        name_of(&self.definition, "uri")
    }
}

/// A resource template (RFC 6570 level 1, e.g. `test://template/{id}/data`).
#[derive(Clone)]
pub struct ResourceTemplate {
    /// The `ResourceTemplate` object as listed by `resources/templates/list`.
    pub definition: Value,
    template: UriTemplate,
    handler: Arc<ReadFn>,
}

impl ResourceTemplate {
    /// A template from its definition (with `uriTemplate`) and read handler.
    pub fn new<F, Fut>(definition: Value, handler: F) -> Self
    where
        F: Fn(ReadRequest, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let template = UriTemplate::parse(name_of(&definition, "uriTemplate"));
        ResourceTemplate {
            definition,
            template,
            handler: Arc::new(move |req, ctx| Box::pin(handler(req, ctx))),
        }
    }

    /// The template string (`definition.uriTemplate`).
    pub fn uri_template(&self) -> &str {
        name_of(&self.definition, "uriTemplate")
    }
}

/// A prompt (MCP 2025-11-25 server/prompts): definition and `prompts/get` handler.
///
/// Required arguments declared in `definition.arguments` are checked before the
/// handler runs (missing → `-32602`).
#[derive(Clone)]
pub struct Prompt {
    /// The `Prompt` object as listed by `prompts/list`.
    pub definition: Value,
    handler: Arc<PromptFn>,
}

impl Prompt {
    /// A prompt from its definition and a handler returning `{description?, messages}`.
    pub fn new<F, Fut>(definition: Value, handler: F) -> Self
    where
        F: Fn(Map<String, Value>, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Prompt {
            definition,
            handler: Arc::new(move |args, ctx| Box::pin(handler(args, ctx))),
        }
    }

    /// The prompt's name.
    pub fn name(&self) -> &str {
        name_of(&self.definition, "name")
    }

    /// Runs the handler.
    pub fn get(&self, arguments: Map<String, Value>, ctx: CallContext) -> BoxFuture<HandlerResult> {
        (self.handler)(arguments, ctx)
    }
}

/// What `completion/complete` refers to (MCP 2025-11-25 server/utilities/completion).
#[derive(Debug, Clone, PartialEq)]
pub enum CompletionRef {
    /// `ref/prompt` with the prompt name.
    Prompt(String),
    /// `ref/resource` with the URI template (or URI).
    Resource(String),
}

/// One `completion/complete` request, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The prompt or resource template.
    pub reference: CompletionRef,
    /// The argument (or template variable) being completed.
    pub argument: String,
    /// What the user has typed so far.
    pub value: String,
    /// Already-resolved arguments (`context.arguments`, 2025-06-18+).
    pub context: Map<String, Value>,
}

/// Everything a server offers. Order is kept: lists are returned in insertion order.
#[derive(Clone, Default)]
pub struct DemoCatalog {
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
    completer: Option<Arc<CompleteFn>>,
}

impl DemoCatalog {
    /// An empty catalogue.
    pub fn new() -> Self {
        DemoCatalog::default()
    }

    /// Adds (or replaces, by name) a tool.
    pub fn with_tool(mut self, tool: Tool) -> Self {
        self.add_tool(tool);
        self
    }

    /// Adds (or replaces, by URI) a resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.add_resource(resource);
        self
    }

    /// Adds (or replaces, by template string) a resource template.
    pub fn with_template(mut self, template: ResourceTemplate) -> Self {
        self.templates
            .retain(|t| t.uri_template() != template.uri_template());
        self.templates.push(template);
        self
    }

    /// Adds (or replaces, by name) a prompt.
    pub fn with_prompt(mut self, prompt: Prompt) -> Self {
        self.add_prompt(prompt);
        self
    }

    /// Sets the `completion/complete` handler; its candidates are filtered by prefix.
    pub fn with_completer<F>(mut self, completer: F) -> Self
    where
        F: Fn(&CompletionRequest) -> Result<Vec<String>, ErrorObject> + Send + Sync + 'static,
    {
        self.completer = Some(Arc::new(completer));
        self
    }

    /// Adds or replaces a tool.
    pub fn add_tool(&mut self, tool: Tool) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
    }

    /// Removes a tool; `true` if it existed.
    pub fn remove_tool(&mut self, name: &str) -> bool {
        let before = self.tools.len();
        self.tools.retain(|t| t.name() != name);
        before != self.tools.len()
    }

    /// Adds or replaces a resource.
    pub fn add_resource(&mut self, resource: Resource) {
        self.resources.retain(|r| r.uri() != resource.uri());
        self.resources.push(resource);
    }

    /// Removes a resource; `true` if it existed.
    pub fn remove_resource(&mut self, uri: &str) -> bool {
        let before = self.resources.len();
        self.resources.retain(|r| r.uri() != uri);
        before != self.resources.len()
    }

    /// Adds or replaces a prompt.
    pub fn add_prompt(&mut self, prompt: Prompt) {
        self.prompts.retain(|p| p.name() != prompt.name());
        self.prompts.push(prompt);
    }

    /// Removes a prompt; `true` if it existed.
    pub fn remove_prompt(&mut self, name: &str) -> bool {
        let before = self.prompts.len();
        self.prompts.retain(|p| p.name() != name);
        before != self.prompts.len()
    }

    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The prompt called `name`.
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name() == name)
    }

    /// `true` if a direct resource or a template serves `uri`.
    pub fn has_resource(&self, uri: &str) -> bool {
        self.resolve(uri).is_some()
    }

    /// `true` if some template has exactly this template string.
    pub fn has_template(&self, uri_template: &str) -> bool {
        self.templates
            .iter()
            .any(|t| t.uri_template() == uri_template)
    }

    /// Starts reading `uri`: a direct resource first, then the first matching template.
    pub fn read(&self, uri: &str, ctx: CallContext) -> Option<BoxFuture<HandlerResult>> {
        let (handler, vars) = self.resolve(uri)?;
        let req = ReadRequest {
            uri: uri.to_owned(),
            vars,
        };
        Some(handler(req, ctx))
    }

    fn resolve(&self, uri: &str) -> Option<Resolved> {
        if let Some(r) = self.resources.iter().find(|r| r.uri() == uri) {
            return Some((r.handler.clone(), Vec::new()));
        }
        self.templates.iter().find_map(|t| {
            t.template
                .matches(uri)
                .map(|vars| (t.handler.clone(), vars))
        })
    }

    /// Runs the completer, if any; `None` when the catalogue has none.
    pub fn complete(&self, req: &CompletionRequest) -> Option<Result<Vec<String>, ErrorObject>> {
        self.completer.as_ref().map(|c| c(req))
    }

    /// `true` if a completer is set (the `completions` capability).
    pub fn has_completer(&self) -> bool {
        self.completer.is_some()
    }

    /// `true` if the catalogue has any tool.
    pub fn has_tools(&self) -> bool {
        !self.tools.is_empty()
    }

    /// `true` if the catalogue has any resource or template.
    pub fn has_resources(&self) -> bool {
        !self.resources.is_empty() || !self.templates.is_empty()
    }

    /// `true` if the catalogue has any prompt.
    pub fn has_prompts(&self) -> bool {
        !self.prompts.is_empty()
    }

    /// The definitions a `list_changed` notification covers, used to detect changes
    /// (resources and resource templates share one).
    pub fn definitions(&self, kind: Changed) -> Vec<Value> {
        match kind {
            Changed::Tools => self.tools.iter().map(|t| t.definition.clone()).collect(),
            Changed::Resources => self
                .resources
                .iter()
                .map(|r| r.definition.clone())
                .chain(self.templates.iter().map(|t| t.definition.clone()))
                .collect(),
            Changed::Prompts => self.prompts.iter().map(|p| p.definition.clone()).collect(),
        }
    }

    /// A whole list result, e.g. `{"tools": [...]}`: lists are not paged, so a
    /// `cursor` (never handed out) → `-32602` (MCP 2025-11-25
    /// server/utilities/pagination: invalid cursors).
    pub fn list_page(&self, kind: ListKind, cursor: Option<&str>) -> Result<Value, ErrorObject> {
        let items: Vec<&Value> = match kind {
            ListKind::Tools => self.tools.iter().map(|t| &t.definition).collect(),
            ListKind::Resources => self.resources.iter().map(|r| &r.definition).collect(),
            ListKind::Templates => self.templates.iter().map(|t| &t.definition).collect(),
            ListKind::Prompts => self.prompts.iter().map(|p| &p.definition).collect(),
        };
        // Lists are not paged, so no cursor was ever handed out.
        if cursor.is_some() {
            return Err(ErrorObject::new(INVALID_PARAMS, "Invalid cursor"));
        }
        let page: Vec<Value> = items.into_iter().cloned().collect();
        let mut out = Map::new();
        out.insert(kind.key().to_owned(), Value::Array(page));
        Ok(Value::Object(out))
    }
}

fn name_of<'a>(definition: &'a Value, field: &str) -> &'a str {
    definition.get(field).and_then(Value::as_str).unwrap_or("")
}

/// A `CallToolResult` with one text block.
pub fn text_result(text: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": text.into() }] })
}

/// A `CallToolResult` reporting an execution error (`isError: true`, MCP 2025-11-25
/// server/tools "Error Handling").
pub fn error_result(text: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true })
}

/// A `ReadResourceResult` with one text content.
pub fn text_contents(uri: &str, mime_type: &str, text: impl Into<String>) -> Value {
    json!({ "contents": [{ "uri": uri, "mimeType": mime_type, "text": text.into() }] })
}

/// A `ReadResourceResult` with one base64 blob content.
pub fn blob_contents(uri: &str, mime_type: &str, bytes: &[u8]) -> Value {
    json!({ "contents": [{ "uri": uri, "mimeType": mime_type, "blob": STANDARD.encode(bytes) }] })
}

/// Filters completion candidates by prefix and shapes the `completion` result (at most
/// 100 values, with `total` and `hasMore`).
pub fn completion_result(candidates: Vec<String>, prefix: &str) -> Value {
    let matching: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect();
    let total = matching.len();
    let values: Vec<String> = matching.into_iter().take(100).collect();
    json!({ "completion": { "values": values, "total": total, "hasMore": total > 100 } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop_tool(name: &str) -> Tool {
        Tool::new(
            json!({"name": name, "inputSchema": {"type": "object"}}),
            |_, _| async { Ok(text_result("ok")) },
        )
    }

    #[test]
    fn lists_everything_and_refuses_cursors() {
        let c = DemoCatalog::new()
            .with_tool(noop_tool("a"))
            .with_tool(noop_tool("b"))
            .with_tool(noop_tool("c"));
        let all = c.list_page(ListKind::Tools, None).unwrap();
        assert_eq!(all["tools"].as_array().unwrap().len(), 3);
        assert!(all.get("nextCursor").is_none());
        let err = c.list_page(ListKind::Tools, Some("garbage")).unwrap_err();
        assert_eq!(err.code, INVALID_PARAMS);
    }

    #[test]
    fn replaces_by_name_and_keeps_order() {
        let mut c = DemoCatalog::new()
            .with_tool(noop_tool("a"))
            .with_tool(noop_tool("b"));
        c.add_tool(noop_tool("a"));
        let names: Vec<String> = c
            .definitions(Changed::Tools)
            .iter()
            .map(|d| d["name"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(names, ["b", "a"]);
        assert!(c.remove_tool("a"));
        assert!(!c.remove_tool("a"));
    }

    #[test]
    fn completion_filters_and_caps() {
        let many: Vec<String> = (0..150).map(|i| format!("v{i}")).collect();
        let r = completion_result(many, "v");
        assert_eq!(r["completion"]["values"].as_array().unwrap().len(), 100);
        assert_eq!(r["completion"]["total"], 150);
        assert_eq!(r["completion"]["hasMore"], true);
        let r = completion_result(vec!["paris".into(), "rome".into()], "pa");
        assert_eq!(r["completion"]["values"], json!(["paris"]));
    }
}
