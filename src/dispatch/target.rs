//! Which backend a request would be routed to, without routing it: with a
//! shared store, a request for a session's per-session stdio child runs on
//! the replica that owns the session (`http/owner.rs`), decided before the
//! request is dispatched.

use std::sync::Arc;

use serde_json::Value;

use super::Dispatch;
use crate::mcp::Method;
use crate::session::{Host, Session};

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

impl Dispatch {
    /// Whether `method` with `params` of `session` names what this replica
    /// cannot route but the replica owning the session's per-session children
    /// may: a `tools/call` or `prompts/get` name or a `resources/read` URI
    /// its view does not know (what a child lists for its session alone is
    /// known where the child runs, `catalog/own.rs`), or a
    /// `tasks/get|result|cancel` id of a per-session stdio backend the
    /// session's task table does not hold (a task lives where its call ran),
    /// or a `tasks/list` while the table holds none (a session's tasks are
    /// listed where they were made; with tasks here, those are listed), or
    /// one of the four lists while the owner marked that its children list
    /// for the session what the catalogue does not
    /// ([`Session::lists_elsewhere`]; no store command otherwise).
    /// `false` for anything else, malformed params included (refused here).
    pub fn unknown_here(
        &self,
        session: &Arc<Session>,
        method: &Method,
        params: Option<&Value>,
    ) -> bool {
        if *method == Method::TasksList {
            return session.tasks().is_empty();
        }
        if method.list_kind().is_some() {
            return session.lists_elsewhere();
        }
        let Some(params) = params else {
            return false;
        };
        let str_at = |key: &str| params.get(key).and_then(Value::as_str);
        let view = || self.view_for(&Host::Legacy(session.clone()));
        match method {
            Method::ToolsCall => str_at("name").is_some_and(|n| !view().tools.contains_key(n)),
            Method::PromptsGet => str_at("name").is_some_and(|n| !view().prompts.contains_key(n)),
            Method::ResourcesRead => str_at("uri").is_some_and(|u| view().route_uri(u).is_none()),
            Method::TasksGet | Method::TasksResult | Method::TasksCancel => {
                let Some(id) = str_at("taskId").filter(|id| session.task(id).is_none()) else {
                    return false;
                };
                let backends = self.catalog.backends();
                id.split_once(':')
                    .and_then(|(name, _)| backends.by_name(name))
                    .is_some_and(|b| self.supervisor.is_owner_bound(b.index, session))
            }
            _ => false,
        }
    }
}
