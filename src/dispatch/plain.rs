//! The plain route: a session's `tools/call`, `prompts/get` or `resources/read`
//! whose params carry nothing but the routed member for the gateway to act on
//! (no `_meta`, `task` or `requestState`; for a tool, no argument audit and no
//! override; no line break) is forwarded as the text the host wrote, with only that member's
//! value (`name`, `uri`) replaced by the backend's own: the params are read by
//! one pass that looks at the top-level members and never built into a
//! `serde_json::Value`. Anything else takes the full route (`Dispatch::route`),
//! which also answers every error.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::rewrite::ResultKind;
use super::{Dispatch, Upstream};
use crate::config::ArgumentLogging;
use crate::jsonrpc::{self, Params, RawJson};
use crate::mcp::Method;
use crate::request::RequestContext;
use crate::session::Host;

/// The top-level members the plain route looks at, borrowed from the text;
/// the others are skipped. A member present at all (even `null`) is `Some`.
/// A duplicate of one of these fails the parse (then the full route runs).
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    uri: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "_meta", deserialize_with = "present")]
    meta: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    task: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "requestState", deserialize_with = "present")]
    request_state: Option<&'a RawValue>,
}

/// Deserializes a member that is present (even as `null`) into `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

impl Dispatch {
    /// The upstream request for `method` with `params` when the plain route
    /// applies (see the module docs), the route recorded in `ctx`; `None`
    /// otherwise, nothing recorded.
    pub(super) fn route_plain(
        &self,
        ctx: &mut RequestContext,
        host: &Host,
        method: &Method,
        params: &Params,
    ) -> Option<Upstream> {
        if !matches!(host, Host::Legacy(_)) {
            return None;
        }
        let text = params.text()?.get();
        // A stdio backend reads one message a line: a line break (whitespace
        // between tokens, never inside a JSON string) must not go out as it is.
        if memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
            return None;
        }
        let top: Top<'_> = serde_json::from_str(text).ok()?;
        if top.meta.is_some() || top.task.is_some() || top.request_state.is_some() {
            return None;
        }
        // Each arm records the route only once the plain route is sure to apply.
        let spliced = |member: &RawValue, original: &str| {
            RawJson::spliced(text, RawJson::span_in(text, member.get())?, original)
        };
        let (backend, params, kind, headers) = match method {
            Method::ToolsCall | Method::PromptsGet => {
                let member = top.name?;
                let name = jsonrpc::string_member(member)?;
                let view = self.view_for(host);
                let (table, kind) = if *method == Method::ToolsCall {
                    (&view.tools, ResultKind::ToolCall)
                } else {
                    (&view.prompts, ResultKind::Prompt)
                };
                let route = table.get(&*name)?;
                let b = self.catalog.backend(route.backend);
                if kind == ResultKind::ToolCall
                    && (!matches!(b.spec.config.audit.arguments, ArgumentLogging::None)
                        || b.tool_override(&route.original).is_some())
                {
                    return None;
                }
                let params = spliced(member, &route.original)?;
                ctx.set_route(&b.spec.name, Some(&name));
                if kind == ResultKind::ToolCall {
                    ctx.set_tool_metrics(b.spec.config.tool_metrics);
                    ctx.set_arguments(None);
                }
                (route.backend, params, kind, route.headers.clone())
            }
            Method::ResourcesRead => {
                let member = top.uri?;
                let uri = jsonrpc::string_member(member)?;
                let (backend, original) = self.view_for(host).route_uri(&uri)?;
                let params = spliced(member, &original)?;
                ctx.set_route(&self.catalog.backend(backend).spec.name, Some(&uri));
                (backend, params, ResultKind::Resource, None)
            }
            _ => return None,
        };
        Some(Upstream {
            backend,
            method: method.clone(),
            params: Params::from_text(params),
            plain: true,
            kind,
            task: None,
            digest: String::new(),
            headers,
        })
    }
}
