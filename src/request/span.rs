//! The `request` span's fields that name what a request is about.

use crate::jsonrpc::Id;
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
    tracing::Span::current().record(field, &*crate::error::clip(target));
}

/// Names the routed `backend` in the current `request` span, and `target` under
/// its kind's field ([`record_target`]).
pub(super) fn record_route(backend: &str, method: Option<&Method>, target: Option<&str>) {
    tracing::Span::current().record("backend", backend);
    if let (Some(m), Some(target)) = (method, target) {
        record_target(m, target);
    }
}

/// The span of one host request from routing to its answer: `info`, named
/// `request`, with `id` (the JSON-RPC id, bounded: [`Id::logged`]), `method`, `session` (the session's
/// log id; absent on the stateless 2026-07-28 face, which has none), and the
/// fields routing fills in: `backend` and the target ([`record_target`]).
///
/// `session` is given at creation, declared after `method`: the formatted span
/// reads `id=… method=… session=…`, the order it had when `session` was
/// recorded after creation (a separate record cost ~1,500 instructions per
/// request: the registry lookup, the field formatter and a reallocation).
pub fn request_span(
    id: &Id,
    method: &dyn std::fmt::Display,
    session: Option<&dyn std::fmt::Display>,
) -> tracing::Span {
    tracing::info_span!(
        "request",
        id = %id.logged(),
        method = %method,
        session = session.map(tracing::field::display),
        backend = tracing::field::Empty,
        tool = tracing::field::Empty,
        prompt = tracing::field::Empty,
        uri = tracing::field::Empty,
    )
}
