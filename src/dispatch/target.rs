//! Which backend a request would be routed to, without routing it: with a
//! shared store, a request for a session's per-session stdio child runs on
//! the replica that owns the session (`http/owner.rs`), decided before the
//! request is dispatched.

use serde_json::Value;

use super::Dispatch;
use crate::mcp::Method;
use crate::session::Host;

impl Dispatch {
    /// The registry index of the backend that `method` with `params` of
    /// `host` goes to, for the requests a backend answers on the session's
    /// own connection: `tools/call` and `prompts/get` (by name),
    /// `resources/read`, `resources/subscribe` and `resources/unsubscribe`
    /// (by URI), `completion/complete` (by reference). `None` for everything
    /// else (lists, `ping`, `logging/setLevel`, tasks: answered here or
    /// routed otherwise) and for what routes nowhere (refused wherever it
    /// runs).
    pub fn target(&self, host: &Host, method: &Method, params: Option<&Value>) -> Option<usize> {
        let params = params?;
        let str_at = |pointer: &str| params.pointer(pointer).and_then(Value::as_str);
        let view = self.view_for(host);
        match method {
            Method::ToolsCall => view.tools.get(str_at("/name")?).map(|r| r.backend),
            Method::PromptsGet => view.prompts.get(str_at("/name")?).map(|r| r.backend),
            Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
                view.route_uri(str_at("/uri")?).map(|(b, _)| b)
            }
            Method::CompletionComplete => match str_at("/ref/type")? {
                "ref/prompt" => view.prompts.get(str_at("/ref/name")?).map(|r| r.backend),
                "ref/resource" => view.route_uri(str_at("/ref/uri")?).map(|(b, _)| b),
                _ => None,
            },
            _ => None,
        }
    }
}
