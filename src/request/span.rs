//! The `request` span's fields that name what a request is about.

use crate::mcp::Method;

/// Names what a request is about in the current `request` span, under the field
/// of its kind, as the OpenTelemetry span does (`gen_ai.tool.name`,
/// `gen_ai.prompt.name`, `mcp.resource.uri`): `tool` for `tools/call`, `prompt`
/// for `prompts/get`, `uri` for `resources/read`, `resources/subscribe` and
/// `resources/unsubscribe`; nothing for other methods. The access line has the
/// same value in `name`, its kind given by `method`.
pub fn record_target(method: &Method, target: &str) {
    let field = match method {
        Method::ToolsCall => "tool",
        Method::PromptsGet => "prompt",
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => "uri",
        _ => return,
    };
    tracing::Span::current().record(field, target);
}

/// Names the routed `backend` in the current `request` span, and `target` under
/// its kind's field ([`record_target`]).
pub(super) fn record_route(backend: &str, method: Option<&Method>, target: Option<&str>) {
    tracing::Span::current().record("backend", backend);
    if let (Some(m), Some(target)) = (method, target) {
        record_target(m, target);
    }
}
