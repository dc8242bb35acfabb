//! The `request` span's fields that name what a request is about.

use std::fmt;

use crate::jsonrpc::Id;
use crate::mcp::Method;

/// Longest part of a request id written to the log, in bytes.
const LOGGED_ID_MAX: usize = 64;

/// A request id as the log shows it: whole up to [`LOGGED_ID_MAX`] bytes (a
/// string id quoted and escaped as always), else its first bytes and its length
/// (`"xxxx…"…(200002 bytes)`). An id may be as long as the body limit allows
/// and is written into the span and the access line; the answer always echoes
/// it whole.
pub struct LoggedId<'a>(pub &'a Id);

impl fmt::Display for LoggedId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self.0 {
            Id::Num(_) => return fmt::Display::fmt(self.0, f),
            Id::Big(digits) => &**digits,
            Id::Str(s) => &**s,
        };
        if text.len() <= LOGGED_ID_MAX {
            return fmt::Display::fmt(self.0, f);
        }
        let mut end = LOGGED_ID_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        match self.0 {
            Id::Str(_) => write!(f, "{:?}", &text[..end])?,
            _ => f.write_str(&text[..end])?,
        }
        write!(f, "…({} bytes)", text.len())
    }
}

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

/// The span of one host request from routing to its answer: `info`, named
/// `request`, with `id` (the JSON-RPC id, bounded: [`LoggedId`]), `method`, `session` (the session's
/// log id; absent on the stateless 2026-07-28 face, which has none), and the
/// fields routing fills in: `backend` and the target ([`record_target`]).
pub fn request_span(
    id: &Id,
    method: &dyn std::fmt::Display,
    session: Option<&dyn std::fmt::Display>,
) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        id = %LoggedId(id),
        session = tracing::field::Empty,
        method = %method,
        backend = tracing::field::Empty,
        tool = tracing::field::Empty,
        prompt = tracing::field::Empty,
        uri = tracing::field::Empty,
    );
    if let Some(session) = session {
        span.record("session", tracing::field::display(session));
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_ids_are_cut_in_the_log_and_short_ones_kept() {
        let short: Id = serde_json::from_str("\"a\\\"b\"").unwrap();
        assert_eq!(LoggedId(&short).to_string(), short.to_string());
        assert_eq!(LoggedId(&Id::Num(-7)).to_string(), "-7");
        let long: Id = serde_json::from_str(&format!("\"{}\"", "é".repeat(100))).unwrap();
        let shown = LoggedId(&long).to_string();
        assert!(shown.ends_with("…(200 bytes)"), "{shown}");
        assert!(shown.len() < 100, "{shown}");
        let big = Id::from_json(&"9".repeat(300)).unwrap();
        assert_eq!(
            LoggedId(&big).to_string(),
            format!("{}…(300 bytes)", "9".repeat(64))
        );
    }
}
