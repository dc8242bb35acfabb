//! The spans and the W3C Trace Context carriers. Span names and attributes follow
//! the OpenTelemetry semantic conventions for MCP (gen-ai/mcp: `{mcp.method.name}
//! {target}`, `mcp.method.name`, `gen_ai.tool.name`, `gen_ai.prompt.name`,
//! `mcp.resource.uri`, `mcp.session.id`, `mcp.protocol.version`,
//! `jsonrpc.request.id`, `error.type`, `rpc.response.status_code`), plus
//! `mcpgate.backend`. The trace context of an MCP request is read from
//! `params._meta` (`traceparent`, `tracestate`: MCP 2026-07-28, SEP-414), else
//! from the HTTP headers (W3C Trace Context); when both are there the `_meta` one
//! is the parent and the HTTP one a link, as the conventions ask.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TARGET, enabled};
use crate::jsonrpc::{Id, Params};
use crate::mcp::Method;

/// The `_meta` keys of W3C Trace Context (MCP 2026-07-28, SEP-414: unprefixed).
const META_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The longest method name an attribute repeats (a host may send any string).
const METHOD_MAX: usize = 64;

/// The SERVER span of one host JSON-RPC request; it ends when dropped (with the
/// request's `RequestContext`).
pub struct ServerSpan {
    span: tracing::Span,
    trace_id: String,
}

impl ServerSpan {
    /// The span of a request of `method` with id `id`, continuing the trace the
    /// host sent in `params._meta` or `headers`. `None` when tracing is off.
    pub fn start(
        headers: &http::HeaderMap,
        method: &Method,
        id: &Id,
        params: Option<&Params>,
    ) -> Option<ServerSpan> {
        if !enabled() {
            return None;
        }
        let span = tracing::info_span!(
            target: TARGET,
            "mcp.server",
            otel.name = method.label(),
            otel.kind = "server",
            otel.status_code = Empty,
            "mcp.method.name" = cut(method.as_str()),
            "jsonrpc.request.id" = %id,
            "mcp.protocol.version" = Empty,
            "mcp.session.id" = Empty,
            "gen_ai.operation.name" = Empty,
            "gen_ai.tool.name" = Empty,
            "gen_ai.prompt.name" = Empty,
            "mcp.resource.uri" = Empty,
            "mcpgate.backend" = Empty,
            "client.address" = Empty,
            "network.transport" = "tcp",
            "network.protocol.name" = "http",
            "error.type" = Empty,
            "rpc.response.status_code" = Empty,
        );
        let (parent, link) = host_context(headers, params.map(|p| &**p));
        let _ = span.set_parent(parent);
        if let Some(link) = link {
            span.add_link(link);
        }
        let trace_id = span.context().span().span_context().trace_id().to_string();
        Some(ServerSpan { span, trace_id })
    }

    /// The trace id, 32 lowercase hex digits (the access line's `trace_id`).
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The context upstream calls are children of.
    pub fn context(&self) -> Context {
        self.span.context()
    }

    /// The session (its short, non-secret log id).
    pub fn set_session(&self, log_id: &str) {
        self.span.record("mcp.session.id", log_id);
    }

    /// The MCP revision the request is served under.
    pub fn set_revision(&self, revision: &str) {
        self.span.record("mcp.protocol.version", revision);
    }

    /// The client's address.
    pub fn set_client(&self, ip: IpAddr) {
        self.span
            .record("client.address", tracing::field::display(ip));
    }

    /// The route: `backend`, and the exposed tool or prompt name (also in the span
    /// name) or resource URI `target`.
    pub fn set_route(&self, method: &Method, backend: &str, target: Option<&str>) {
        self.span.record("mcpgate.backend", backend);
        record_target(&self.span, method, target);
    }

    /// How the request ended: `error` is `error.type` (a JSON-RPC code, or a
    /// class such as `timeout`), `code` the JSON-RPC error code answered.
    pub fn finish(&self, error: Option<&str>, code: Option<i64>) {
        finish(&self.span, error, code);
    }
}

/// The CLIENT span of one upstream request; it ends when dropped.
pub struct ClientSpan(tracing::Span);

impl ClientSpan {
    /// The span of upstream request `id` of `method` to `backend`, a child of
    /// `parent`; its trace context is written into `params._meta` (replacing
    /// `traceparent`/`tracestate` there, keeping every other key).
    pub fn start(
        parent: Context,
        backend: &str,
        method: &Method,
        id: u64,
        transport: &'static str,
        params: &mut Option<Cow<'_, Params>>,
    ) -> ClientSpan {
        let span = tracing::info_span!(
            target: TARGET,
            "mcp.client",
            otel.name = method.label(),
            otel.kind = "client",
            otel.status_code = Empty,
            "mcp.method.name" = cut(method.as_str()),
            "jsonrpc.request.id" = id,
            "gen_ai.operation.name" = Empty,
            "gen_ai.tool.name" = Empty,
            "gen_ai.prompt.name" = Empty,
            "mcp.resource.uri" = Empty,
            "mcpgate.backend" = backend,
            "network.transport" = transport,
            "error.type" = Empty,
            "rpc.response.status_code" = Empty,
        );
        let _ = span.set_parent(parent);
        let key = match method {
            Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
                "uri"
            }
            _ => "name",
        };
        let target = params
            .as_deref()
            .and_then(|p| p.get(key))
            .and_then(Value::as_str);
        record_target(&span, method, target);
        inject_meta(&span.context(), params);
        ClientSpan(span)
    }

    /// The span, to instrument the exchange with (the HTTP link reads the
    /// current context for its headers: [`inject_current`]).
    pub fn span(&self) -> &tracing::Span {
        &self.0
    }

    /// How the call ended (as [`ServerSpan::finish`]).
    pub fn finish(&self, error: Option<&str>, code: Option<i64>) {
        finish(&self.0, error, code);
    }
}

fn record_target(span: &tracing::Span, method: &Method, target: Option<&str>) {
    let Some(target) = target else { return };
    let field = match method {
        Method::ToolsCall => {
            span.record("gen_ai.operation.name", "execute_tool");
            "gen_ai.tool.name"
        }
        Method::PromptsGet => "gen_ai.prompt.name",
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            // Not in the span name: URIs are unbounded.
            span.record("mcp.resource.uri", target);
            return;
        }
        _ => return,
    };
    span.record(field, target);
    // The OpenTelemetry span is already started (its context was read), so its
    // name is updated through it: `otel.name` is read only at the start.
    span.context()
        .span()
        .update_name(format!("{} {target}", method.label()));
}

fn finish(span: &tracing::Span, error: Option<&str>, code: Option<i64>) {
    if let Some(code) = code {
        span.record("rpc.response.status_code", tracing::field::display(code));
    }
    if let Some(error) = error {
        span.record("error.type", error);
        span.record("otel.status_code", "error");
    }
}

/// Writes the current span's trace context into `headers` (`traceparent`,
/// `tracestate`) when tracing is on and a span is current: the HTTP requests of
/// an upstream call, inside its [`ClientSpan`].
pub fn inject_current(headers: &mut http::HeaderMap) {
    if !enabled() {
        return;
    }
    let cx = Context::current();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// `params._meta` as a carrier.
struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The host's trace context (see the module docs) and, when the HTTP headers
/// carry another one than `_meta`, that one as a link.
fn host_context(
    headers: &http::HeaderMap,
    params: Option<&Value>,
) -> (Context, Option<SpanContext>) {
    let propagator = TraceContextPropagator::new();
    let valid = |cx: &Context| cx.span().span_context().is_valid();
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .map(|m| propagator.extract(&Meta(m)))
        .filter(valid);
    let http = Some(propagator.extract(&HeaderExtractor(headers))).filter(valid);
    match (meta, http) {
        (Some(m), Some(h)) => {
            let link = h.span().span_context().clone();
            let differs = link.span_id() != m.span().span_context().span_id();
            (m, differs.then_some(link))
        }
        (Some(cx), None) | (None, Some(cx)) => (cx, None),
        (None, None) => (Context::new(), None),
    }
}

/// Writes `cx` into `params._meta` (created if absent; a `_meta` that is not an
/// object, or params that are not one, are left alone).
fn inject_meta(cx: &Context, params: &mut Option<Cow<'_, Params>>) {
    let mut fields: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut fields);
    if fields.is_empty() {
        return;
    }
    let p = params
        .get_or_insert_with(|| Cow::Owned(Value::Object(Map::new()).into()))
        .to_mut();
    let Some(obj) = p.value_mut().and_then(Value::as_object_mut) else {
        return;
    };
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    for key in META_KEYS {
        match fields.remove(key) {
            Some(v) => meta.insert(key.into(), Value::String(v)),
            None => meta.shift_remove(key),
        };
    }
}

fn cut(s: &str) -> &str {
    if s.len() <= METHOD_MAX {
        return s;
    }
    let mut end = METHOD_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
