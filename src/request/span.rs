//! The `request` span's fields that name what a request is about.

use tracing::Value;
use tracing::span::Record;

use crate::jsonrpc::Id;
use crate::mcp::Method;

/// Names what a request is about in the current `request` span, under the field
/// of its kind, as the OpenTelemetry span does (`gen_ai.tool.name`,
/// `gen_ai.prompt.name`, `mcp.resource.uri`): `tool` for `tools/call`, `prompt`
/// for `prompts/get`, `uri` for `resources/read`, `resources/subscribe` and
/// `resources/unsubscribe`; nothing for other methods. The access line has the
/// same value in `name`, its kind given by `method`.
pub fn record_target(method: &Method, target: &str) {
    if let Some(field) = target_field(method) {
        record_current((field, &crate::error::clip(target)), None);
    }
}

/// Names the routed `backend` in the current `request` span, and `target` under
/// its kind's field ([`record_target`]), in one record: `backend` first.
pub(super) fn record_route(backend: &str, method: Option<&Method>, target: Option<&str>) {
    let target = method
        .and_then(target_field)
        .zip(target.map(crate::error::clip));
    record_current(
        ("backend", backend),
        target.as_ref().map(|(f, t)| (*f, &**t)),
    );
}

/// The `request` span's field for what a request of `method` is about.
fn target_field(method: &Method) -> Option<&'static str> {
    match method {
        Method::ToolsCall => Some("tool"),
        Method::PromptsGet => Some("prompt"),
        Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            Some("uri")
        }
        _ => None,
    }
}

/// Records string fields `first` and `second` (name, value) in the current
/// span, in this order, as `Span::current().record(name, value)` for each
/// would, without a handle: `Span::current` clones the span in the registry
/// and its drop closes the clone, and each `record` looks the span up and
/// formats its fields again. A field the span does not have is skipped.
fn record_current(first: (&str, &str), second: Option<(&str, &str)>) {
    tracing::dispatcher::get_default(|d| {
        let current = d.current_span();
        let (Some(id), Some(meta)) = (current.id(), current.metadata()) else {
            return;
        };
        let set = meta.fields();
        let one = set.field(first.0).map(|f| (f, first.1));
        let two = second.and_then(|(n, v)| set.field(n).map(|f| (f, v)));
        match (one, two) {
            (Some((f0, v0)), Some((f1, v1))) => {
                let values = [
                    (&f0, Some(&v0 as &dyn Value)),
                    (&f1, Some(&v1 as &dyn Value)),
                ];
                d.record(id, &Record::new(&set.value_set(&values)));
            }
            (Some((f, v)), None) | (None, Some((f, v))) => {
                let values = [(&f, Some(&v as &dyn Value))];
                d.record(id, &Record::new(&set.value_set(&values)));
            }
            (None, None) => {}
        }
    });
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
