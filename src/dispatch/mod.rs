//! The dispatch: the route phase of a host request. A request is answered by the
//! gateway itself (`ping`, the four lists from the pre-serialized catalogue,
//! `logging/setLevel`, refusals) or routed — by a table lookup of the exposed
//! name or URI in the caller's view — to the backend that owns it, and forwarded
//! there ([`forward`]). The answer's outcome is typed and recorded once, by the
//! request's [`RequestContext`].

mod bridge;
mod call;
mod forward;
mod modern;
mod plain;
pub(crate) mod rewrite;
mod shim;
mod target;
mod tasks;
mod wrap;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::catalog::{Catalog, View, inject_overrides};
use crate::cluster::Sealer;
use crate::error::RpcError;
use crate::jsonrpc::{self, Id, Params};
use crate::mcp::{ListKind, LogLevel, Method, Request};
use crate::metrics::Metrics;
use crate::relay::Relay;
use crate::request::{Outcome, RequestContext};
use crate::session::{Host, Outbound, Session};
use crate::streamable_http::ParamHeaders;
use crate::supervisor::Supervisor;
pub use call::Call;
use rewrite::ResultKind;

/// How the answer to a host request is delivered.
pub enum Reply {
    /// The complete JSON-RPC response.
    Now(Bytes),
    /// Messages related to the request, ending with [`Outbound::Final`]; the
    /// channel closes without a final message when the host cancelled.
    Stream(mpsc::Receiver<Outbound>),
    /// As [`Reply::Stream`], from a backend call that the receiver runs.
    Call(Call),
}

/// A request the route phase sends to a backend.
struct Upstream {
    /// Registry index of the backend.
    backend: usize,
    method: Method,
    /// The params with the backend's own names.
    params: Params,
    /// Made by the plain route (`plain`): `params` is the host's text with the
    /// routed member replaced, without `_meta` or `task`.
    plain: bool,
    /// What in the result needs the backend's namespace.
    kind: ResultKind,
    /// For `tasks/get|result|cancel`: the exposed task id the result must carry.
    task: Option<String>,
    /// For a 2026-07-28 call: the digest of the host's own params, which a retry
    /// answering `input_required` must match.
    digest: String,
    /// The called tool's `x-mcp-header` annotations, mirrored toward 2026-07-28
    /// HTTP backends.
    headers: Option<Arc<ParamHeaders>>,
}

/// What the route phase decided.
enum Routed {
    /// The gateway answers: the complete response, or an error for it.
    Answer(Result<Bytes, RpcError>),
    /// A backend answers.
    Forward(Upstream),
}

/// The dispatch; see the module docs.
pub struct Dispatch {
    bridge: Arc<bridge::Bridge>,
    catalog: Arc<Catalog>,
    supervisor: Arc<Supervisor>,
    relay: Arc<Relay>,
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("params.{key} must be a string")))
}

fn result(id: &Id, v: &Value) -> Routed {
    Routed::Answer(Ok(jsonrpc::result_value_bytes(id, v).into()))
}

/// Answers `id` with error `e`, shaped for `host`'s revision.
fn error_reply(mut ctx: RequestContext, host: &Host, id: &Id, e: &RpcError) -> Reply {
    let mut error = e.to_error_object();
    crate::mcp::version::shape_error(&mut error, host.version());
    let bytes: Bytes = jsonrpc::error_bytes(Some(id), &error).into();
    ctx.set_bytes_out(bytes.len());
    ctx.finish_error(Outcome::of(e), error.code);
    Reply::Now(bytes)
}

/// A result the gateway answers itself, shaped for `host`'s revision.
fn local_result(host: &Host, id: &Id, mut v: Value) -> Routed {
    if host.version().is_modern()
        && let Some(obj) = v.as_object_mut()
    {
        crate::mcp::version::complete_for_modern(obj, false);
    }
    result(id, &v)
}

impl Dispatch {
    /// The dispatch over `catalog`, opening connections through `supervisor`.
    /// `input_required_timeout`: how long a call answered `input_required` waits
    /// for its retry before it is cancelled upstream (MCP 2026-07-28 mrtr: never
    /// assume the retry comes). `sealer` (the `[cluster]` keys) seals every
    /// `requestState` the gateway issues, so a state opens on every replica with
    /// the same keys; a continuation names the replica holding it (the shared
    /// store's tag, or a random id of this process). Retries are counted in
    /// `metrics.input_required_retries`.
    pub fn new(
        input_required_timeout: std::time::Duration,
        catalog: Arc<Catalog>,
        supervisor: Arc<Supervisor>,
        relay: Arc<Relay>,
        sealer: Arc<Sealer>,
        metrics: &Metrics,
    ) -> Arc<Dispatch> {
        let replica = supervisor.shared().map(|s| s.tag().to_owned());
        let bridge = bridge::Bridge::new(
            input_required_timeout,
            sealer,
            replica.as_deref(),
            metrics.input_required_retries.clone(),
        );
        tracing::debug!(
            replica = bridge.replica(),
            "input_required continuations are parked under this replica name"
        );
        Arc::new(Dispatch {
            bridge: Arc::new(bridge),
            catalog,
            supervisor,
            relay,
        })
    }

    /// Sets `server.input_required_timeout` (hot reload): calls answered
    /// `input_required` from now on wait this long for their retry.
    pub fn set_input_required_timeout(&self, timeout: std::time::Duration) {
        self.bridge.set_ttl(timeout);
    }

    /// Answers or routes one request of `host`; `ctx` is finished when the answer
    /// is known (now, or when the backend answers).
    pub async fn handle(
        self: &Arc<Self>,
        mut ctx: RequestContext,
        host: &Host,
        req: Request,
    ) -> Reply {
        let Request { id, method, params } = req;
        if let Some(p) = &params
            && let Some(up) = self.route_plain(&mut ctx, host, &method, p)
        {
            return self.forward(ctx, host, &id, up);
        }
        let params = match params.map(Params::into_value).transpose() {
            Ok(p) => p.unwrap_or_else(|| json!({})),
            Err(e) => {
                let e = RpcError::invalid_params(format!("params: {e}"));
                return error_reply(ctx, host, &id, &e);
            }
        };
        // `_meta` is an object wherever MCP puts it (2025-11-25 basic, `_meta`):
        // anything else is refused here, not handed to a backend.
        if params.get("_meta").is_some_and(|m| !m.is_object()) {
            let e = RpcError::invalid_params("params._meta must be an object");
            return error_reply(ctx, host, &id, &e);
        }
        // MCP 2025-11-25 basic/utilities/progress: "Progress tokens MUST be a
        // string or integer value".
        if params.pointer("/_meta/progressToken").is_some()
            && jsonrpc::progress_token(Some(&params)).is_none()
        {
            let e = RpcError::invalid_params(
                "params._meta.progressToken must be a string or an integer",
            );
            return error_reply(ctx, host, &id, &e);
        }
        // A retry after input_required: of a call relayed to a 2026-07-28
        // backend (its state wrapped in ours: routed again, unwrapped below),
        // else of a bridged call parked here.
        let mut wrapped = None;
        if let (Host::Modern(m), Some(state)) = (host, params.get("requestState")) {
            let state = state.as_str().unwrap_or_default();
            let principal = m.principal.as_ref();
            match wrap::open(&self.bridge, state, &method, &params, principal) {
                Some(Ok(w)) => wrapped = Some(w),
                Some(Err(e)) => return error_reply(ctx, host, &id, &e),
                None => return self.resume(ctx, host, &id, &method, &params),
            }
        }
        if method == Method::SubscriptionsListen && host.version().is_modern() {
            if let Err(e) = modern::check_listen(&params) {
                return error_reply(ctx, host, &id, &e);
            }
            ctx.finish(Outcome::Ok);
            return modern::listen(&self.catalog, &self.relay, host, &id, &params);
        }
        // What a retry of a bridged call must match, from the host's own params.
        let digest = host
            .version()
            .is_modern()
            .then(|| bridge::call_digest(&method, &params));
        match self.route(&mut ctx, host, &id, &method, params).await {
            Routed::Answer(Ok(bytes)) => {
                ctx.set_bytes_out(bytes.len());
                ctx.finish(Outcome::Ok);
                Reply::Now(bytes)
            }
            Routed::Answer(Err(e)) => error_reply(ctx, host, &id, &e),
            Routed::Forward(mut up) => {
                if let Some(w) = wrapped {
                    let backend = &self.catalog.backend(up.backend).spec.name;
                    if let Err(e) = w.apply(&self.bridge, backend, &mut up.params) {
                        return error_reply(ctx, host, &id, &e);
                    }
                }
                up.digest = digest.unwrap_or_default();
                self.forward(ctx, host, &id, up)
            }
        }
    }

    async fn route(
        &self,
        ctx: &mut RequestContext,
        host: &Host,
        id: &Id,
        method: &Method,
        params: Value,
    ) -> Routed {
        if let Some(kind) = method.list_kind() {
            return Routed::Answer(self.list(host, id, kind, &params));
        }
        let routed = match (method, host) {
            (Method::ToolsCall | Method::PromptsGet, _) => {
                self.route_named(ctx, host, method, params)
            }
            (Method::ResourcesRead, _) => self.route_uri(ctx, host, method, params),
            (Method::CompletionComplete, _) => self.route_completion(ctx, host, id, params),
            (Method::ServerDiscover, Host::Modern(_)) => {
                let found = modern::discover(&self.catalog, &self.supervisor, host, id);
                return Routed::Answer(Box::pin(found).await);
            }
            // Boxed, as `discover` above: their futures (backend round trips,
            // the shared store) would otherwise make every request's future larger.
            (_, Host::Legacy(session)) => {
                Box::pin(self.route_legacy(ctx, session, id, method, params)).await
            }
            (other, Host::Modern(_)) => Err(RpcError::MethodNotFound(other.as_str().to_owned())),
        };
        match routed {
            Ok(r) => r,
            Err(e) => Routed::Answer(Err(e)),
        }
    }

    /// The methods only a session has: `ping`, subscriptions, `logging/setLevel`,
    /// the core tasks of 2025-11-25.
    async fn route_legacy(
        &self,
        ctx: &mut RequestContext,
        session: &Arc<Session>,
        id: &Id,
        method: &Method,
        params: Value,
    ) -> Result<Routed, RpcError> {
        match method {
            Method::Ping => Ok(result(id, &json!({}))),
            Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => Ok(Routed::Answer(
                self.subscription(ctx, session, id, method, params).await,
            )),
            Method::LoggingSetLevel => {
                Ok(Routed::Answer(self.set_level(session, id, &params).await))
            }
            Method::TasksGet | Method::TasksResult | Method::TasksCancel => {
                self.route_task(ctx, session, method, params).await
            }
            Method::TasksList => {
                // One page, never a `nextCursor`: any cursor is not ours
                // (as an unknown cursor of the other lists).
                match params.get("cursor") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(_)) => return Err(RpcError::InvalidCursor),
                    Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
                }
                let listed = tasks::task_list(&self.catalog, &self.supervisor, session, id);
                Ok(Routed::Answer(listed.await))
            }
            Method::Initialize => Err(RpcError::InvalidRequest(
                "session is already initialized".into(),
            )),
            other => Err(RpcError::MethodNotFound(other.as_str().to_owned())),
        }
    }

    /// The catalogue `host` may see (a session: with what its own per-session
    /// connections list, `catalog/own.rs`).
    fn view_for(&self, host: &Host) -> Arc<View> {
        match host {
            Host::Legacy(s) => self.catalog.view_for_session(&s.view_key(), s.id()),
            Host::Modern(m) => self.catalog.view_for_key(&m.view_key),
        }
    }

    /// The four lists, from the caller's pre-serialized view.
    fn list(
        &self,
        host: &Host,
        id: &Id,
        kind: ListKind,
        params: &Value,
    ) -> Result<Bytes, RpcError> {
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
        };
        let view = self.view_for(host);
        let page = view
            .page(kind, cursor, host.version())
            .ok_or(RpcError::InvalidCursor)?;
        Ok(jsonrpc::result_bytes(id, page.get().as_bytes()).into())
    }

    /// `tools/call` and `prompts/get`: route by exposed name.
    fn route_named(
        &self,
        ctx: &mut RequestContext,
        host: &Host,
        method: &Method,
        mut params: Value,
    ) -> Result<Routed, RpcError> {
        let name = str_param(&params, "name")?;
        let view = self.view_for(host);
        let (table, what, kind) = if *method == Method::ToolsCall {
            (&view.tools, "tool", ResultKind::ToolCall)
        } else {
            (&view.prompts, "prompt", ResultKind::Prompt)
        };
        let Some(route) = table.get(name) else {
            // An unknown name is named in the span too (a known one by `set_route`,
            // once: a field recorded twice is written twice).
            crate::request::record_target(method, name);
            return Err(RpcError::UnknownName {
                what,
                name: name.to_owned(),
            });
        };
        let b = self.catalog.backend(route.backend);
        ctx.set_route(&b.spec.name, Some(name));
        if kind == ResultKind::ToolCall {
            ctx.set_tool_metrics(b.spec.config.tool_metrics);
            let audit = &b.spec.config.audit;
            ctx.set_arguments(crate::request::audited_arguments(
                audit,
                params.get("arguments"),
            ));
        }
        params["name"] = route.original.clone().into();
        if kind == ResultKind::ToolCall
            && let Some(o) = b.tool_override(&route.original)
        {
            inject_overrides(&mut params, o);
        }
        Ok(Routed::Forward(Upstream {
            backend: route.backend,
            method: method.clone(),
            params: params.into(),
            plain: false,
            kind,
            task: None,
            digest: String::new(),
            headers: route.headers.clone(),
        }))
    }

    /// `resources/read`: route by exposed URI.
    fn route_uri(
        &self,
        ctx: &mut RequestContext,
        host: &Host,
        method: &Method,
        mut params: Value,
    ) -> Result<Routed, RpcError> {
        let uri = str_param(&params, "uri")?;
        let Some((backend, original)) = self.view_for(host).route_uri(uri) else {
            return Err(RpcError::ResourceNotFound {
                uri: uri.to_owned(),
            });
        };
        ctx.set_route(&self.catalog.backend(backend).spec.name, Some(uri));
        params["uri"] = original.into();
        Ok(Routed::Forward(Upstream {
            backend,
            method: method.clone(),
            params: params.into(),
            plain: false,
            kind: ResultKind::Resource,
            task: None,
            digest: String::new(),
            headers: None,
        }))
    }

    /// `completion/complete`: `ref/prompt` by name, `ref/resource` by template URI.
    fn route_completion(
        &self,
        ctx: &mut RequestContext,
        host: &Host,
        id: &Id,
        mut params: Value,
    ) -> Result<Routed, RpcError> {
        let view = self.view_for(host);
        let target = match params.pointer("/ref/type").and_then(Value::as_str) {
            Some("ref/prompt") => params
                .pointer("/ref/name")
                .and_then(Value::as_str)
                .and_then(|n| view.prompts.get(n))
                .map(|r| (r.backend, "name", r.original.clone())),
            Some("ref/resource") => params
                .pointer("/ref/uri")
                .and_then(Value::as_str)
                .and_then(|u| view.route_uri(u))
                .map(|(b, u)| (b, "uri", u)),
            _ => {
                return Err(RpcError::invalid_params(
                    "params.ref must be ref/prompt or ref/resource",
                ));
            }
        };
        let (backend, field, original) = target.ok_or(RpcError::UnknownReference)?;
        let b = self.catalog.backend(backend);
        if !b.has_capability("completions") {
            // What a server without the capability answers (MCP server/utilities/completion).
            return Ok(local_result(
                host,
                id,
                json!({"completion": {"values": [], "hasMore": false}}),
            ));
        }
        ctx.set_route(&b.spec.name, None);
        params["ref"][field] = original.into();
        Ok(Routed::Forward(Upstream {
            backend,
            method: Method::CompletionComplete,
            params: params.into(),
            plain: false,
            kind: ResultKind::Opaque,
            task: None,
            digest: String::new(),
            headers: None,
        }))
    }

    /// `logging/setLevel`: kept on the session (messages below it are not
    /// relayed), sent to the session's own backend connections that log, and,
    /// with a shared store, recorded there and announced to the other replicas
    /// before the answer (a store that does not answer leaves it local).
    async fn set_level(
        &self,
        session: &Session,
        id: &Id,
        params: &Value,
    ) -> Result<Bytes, RpcError> {
        let level = str_param(params, "level")
            .ok()
            .and_then(LogLevel::parse)
            .ok_or_else(|| RpcError::invalid_params("params.level must be a log level"))?;
        self.supervisor.apply_level(session, level);
        if let Some(store) = self.supervisor.shared()
            && store
                .set_level(session.store_key(), level.as_str())
                .await
                .is_err()
        {
            tracing::debug!(session = %session.log_id(), "log level kept on this replica only: the shared store did not answer");
        }
        Ok(jsonrpc::result_value_bytes(id, &json!({})).into())
    }

    /// `resources/subscribe` and `resources/unsubscribe`: refcounted per (backend,
    /// URI) on shared connections, so the backend is subscribed once and
    /// unsubscribed with the last subscriber, and with a shared store held by
    /// one replica of the cluster (MCP 2025-11-25 server/resources,
    /// subscriptions; `supervisor/subscriptions.rs`).
    async fn subscription(
        &self,
        ctx: &mut RequestContext,
        session: &Arc<Session>,
        id: &Id,
        method: &Method,
        params: Value,
    ) -> Result<Bytes, RpcError> {
        let uri = str_param(&params, "uri")?;
        let host = Host::Legacy(session.clone());
        let Some((backend, original)) = self.view_for(&host).route_uri(uri) else {
            return Err(RpcError::ResourceNotFound {
                uri: uri.to_owned(),
            });
        };
        let b = self.catalog.backend(backend);
        ctx.set_route(&b.spec.name, Some(uri));
        let supported = b.catalog().is_some_and(|c| {
            c.init.capabilities.pointer("/resources/subscribe") == Some(&Value::Bool(true))
        });
        if !supported {
            return Err(RpcError::Unsupported(
                "Resource subscriptions are not supported for this resource".into(),
            ));
        }
        let on = *method == Method::ResourcesSubscribe;
        match self
            .supervisor
            .subscription(session, &b, &original, on)
            .await
        {
            Ok(None) => Ok(jsonrpc::result_value_bytes(id, &json!({})).into()),
            Ok(Some(raw)) => Ok(jsonrpc::result_bytes(id, raw.as_bytes()).into()),
            Err(e) => Err(RpcError::Backend(e)),
        }
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel`: route by the session's
    /// table; a task it lacks is read from the shared store (made through
    /// another replica, `supervisor/tasks.rs`). A task bound to a backend
    /// process that does not serve the session here is refused.
    async fn route_task(
        &self,
        ctx: &mut RequestContext,
        session: &Arc<Session>,
        method: &Method,
        mut params: Value,
    ) -> Result<Routed, RpcError> {
        // A string (MCP 2025-11-25 schema, `GetTaskRequest` and its kin):
        // another type is the host's error, not an unknown task.
        let exposed = str_param(&params, "taskId")?.to_owned();
        let unknown = || RpcError::UnknownTask(exposed.clone());
        let route = match session.task(&exposed) {
            Some(route) => route,
            None => (self.supervisor.recorded_task(session, &exposed).await).ok_or_else(unknown)?,
        };
        let b = self
            .catalog
            .backends()
            .by_name(&route.backend)
            .ok_or_else(unknown)?;
        ctx.set_route(&b.spec.name, Some(&exposed));
        (self.supervisor)
            .check_task_process(session, b.index, &exposed, &route)
            .await?;
        params["taskId"] = route.original.into();
        let kind = if *method == Method::TasksResult {
            ResultKind::ToolCall
        } else {
            ResultKind::Opaque
        };
        Ok(Routed::Forward(Upstream {
            backend: b.index,
            method: method.clone(),
            params: params.into(),
            plain: false,
            kind,
            task: Some(exposed),
            digest: String::new(),
            headers: None,
        }))
    }
}
