//! The forward and respond phases: a routed host request becomes an upstream
//! request on the connection that serves the session, in a task of its own (a
//! host that disconnects does not cancel it: MCP 2025-11-25 transports, a
//! disconnect is not a cancellation; the HTTP handler runs it inline while it
//! waits for the answer, see `Call`). Related messages stream to the host as they
//! come; the result is rewritten into the host's namespace and revision.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::bridge::{self, Continuation};
use super::rewrite::{expose_error, rewrite_result};
use super::shim::{self, ShimError};
use super::{Call, Dispatch, Reply, Upstream, wrap};
use crate::backend::{BackendError, Caller};
use crate::error::RpcError;
use crate::jsonrpc::{self, Encoded, Id, Params, RawJson};
use crate::mcp::marks::Marks;
use crate::mcp::version::{complete_raw_for_modern, result_for_legacy, shape_error};
use crate::mcp::{Method, input, names};
use crate::request::{Outcome, RequestContext};
use crate::session::{Ask, Host, HostCall, Session, TaskRoute};

/// Related messages queued toward the host per call before new ones are dropped.
const CALL_QUEUE: usize = 64;
/// How long a bridged call gathers backend requests into one `input_required`.
const GATHER: std::time::Duration = std::time::Duration::from_millis(50);

impl Dispatch {
    /// Starts the upstream request and returns the stream its messages and
    /// answer come on.
    pub(super) fn forward(
        self: &Arc<Self>,
        mut ctx: RequestContext,
        host: &Host,
        id: &Id,
        mut up: Upstream,
    ) -> Reply {
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        // Plain params have no `_meta` (read without parsing them).
        let token = if up.plain {
            None
        } else {
            jsonrpc::progress_token(Some(&up.params)).cloned()
        };
        let call =
            HostCall::new(host.clone(), id.clone(), token, tx).with_trace(ctx.trace_context());
        let call = call.with_param_headers(up.headers.clone());
        let call = Arc::new(call);
        match host {
            // A legacy host cancels by id: the call must be findable, and its id
            // unique among the session's calls in flight.
            Host::Legacy(session) if !session.start_call(&call) => {
                let e = RpcError::InvalidRequest(
                    "request id is already in use by a request in flight".into(),
                );
                let bytes: bytes::Bytes =
                    jsonrpc::error_bytes(Some(id), &e.to_error_object()).into();
                ctx.set_bytes_out(bytes.len());
                ctx.finish_error(Outcome::of(&e), e.code());
                return Reply::Now(bytes);
            }
            Host::Legacy(_) => {}
            Host::Modern(_) => super::modern::strip_envelope(&mut up.params),
        }
        let me = self.clone();
        let span = tracing::Span::current();
        if call.host.version().is_modern() && up.may_ask() {
            let task = async move { me.run_modern(ctx, call, up).await };
            tokio::spawn(tracing::Instrument::instrument(task, span));
            Reply::Stream(rx)
        } else {
            let task = async move { me.run(ctx, call, up).await };
            Reply::Call(Call::new(tracing::Instrument::instrument(task, span), rx))
        }
    }

    /// The forward task: call the backend, shape the answer, finish the request.
    /// A 2026-07-28 backend's `input_required` for a legacy session is shimmed
    /// into requests to the host and retries ([`shim`]).
    async fn run(&self, ctx: RequestContext, call: Arc<HostCall>, up: Upstream) {
        let outcome = {
            let _upstream = ctx.upstream_call();
            self.call_until_host_gone(&call, &up).await
        };
        // One pass over the result for every key acted on from here.
        let mut marks = outcome.as_ref().ok().map(|raw| Marks::of(raw.as_bytes()));
        let outcome = match (&call.host, outcome) {
            (Host::Legacy(_), Ok(raw))
                if up.may_ask()
                    && input::is_input_required(&raw, marks.unwrap_or(Marks::all())) =>
            {
                marks = None;
                self.shim(&ctx, &call, &up, raw).await
            }
            (Host::Legacy(_), outcome) => shim::for_legacy(outcome, up.method == Method::ToolsCall),
            (Host::Modern(_), outcome) => outcome,
        };
        // Ours unless the host cancelled meanwhile (then no answer is due).
        let ours = match &call.host {
            Host::Legacy(session) => session.take_call(&call.id).is_some(),
            Host::Modern(_) => true,
        };
        let id = call.id.clone();
        self.finish_call(ctx, &call, &up, &id, outcome, ours, marks)
            .await;
    }

    /// The respond phase: the result or error in the host's terms, with id
    /// `id`; `marks`: those of the result, if already searched.
    #[allow(clippy::too_many_arguments)]
    async fn finish_call(
        &self,
        mut ctx: RequestContext,
        call: &HostCall,
        up: &Upstream,
        id: &Id,
        outcome: Result<RawJson, BackendError>,
        ours: bool,
        marks: Option<Marks>,
    ) {
        let marks = match (&outcome, marks) {
            (_, Some(m)) => m,
            (Ok(raw), None) => Marks::of(raw.as_bytes()),
            (Err(_), None) => Marks::all(),
        };
        let mut asks = false;
        let outcome = match (&call.host, outcome) {
            (Host::Legacy(_), Ok(raw)) => {
                let tool_call = up.method == Method::ToolsCall;
                result_for_legacy(raw, tool_call, marks).map_err(BackendError::Rpc)
            }
            (Host::Modern(m), Ok(raw)) if input::is_input_required(&raw, marks) => {
                asks = true;
                let name = &self.catalog.backend(up.backend).spec.name;
                wrap::pass(&self.bridge, m, up, name, &raw)
            }
            // 2026-07-28 has no -32042: the URLs are asked, the call replayed.
            (Host::Modern(m), Err(BackendError::Rpc(e)))
                if e.code == jsonrpc::URL_ELICITATION_REQUIRED =>
            {
                let name = &self.catalog.backend(up.backend).spec.name;
                let asked = wrap::url_required(&self.bridge, m, up, name, &e);
                asks = asked.is_ok();
                asked
            }
            (_, outcome) => outcome,
        };
        let bytes: Encoded = match outcome {
            Err(BackendError::Cancelled) => return ctx.finish(Outcome::Cancelled),
            Ok(raw) => {
                if up.method == Method::ToolsCall && ctx.is_traced() && is_tool_error(&raw) {
                    ctx.set_tool_error();
                }
                let (raw, created) = self.shape_result(&call.host, up, raw, marks);
                if let (Host::Legacy(session), Some((exposed, route))) = (&call.host, created) {
                    // Before the host learns the id: it may ask another replica.
                    (self.supervisor)
                        .record_task(session, up.backend, &exposed, &route)
                        .await;
                }
                // The backend's bytes, not copied: our envelope around them.
                let bytes = jsonrpc::result_encoded(id, &raw);
                ctx.set_bytes_out(bytes.len());
                ctx.finish(if asks {
                    Outcome::InputRequired
                } else {
                    Outcome::Ok
                });
                bytes
            }
            Err(e) => {
                let b = self.catalog.backend(up.backend);
                tracing::debug!(backend = %b.spec.name, method = %up.method, cause = %e, "backend call failed");
                let mut error = e.to_error_object();
                expose_error(&mut error, &b.spec.name, &b.uri_prefix);
                shape_error(&mut error, call.host.version());
                let bytes = jsonrpc::error_bytes(Some(id), &error);
                ctx.set_bytes_out(bytes.len());
                ctx.finish_error(Outcome::of_backend(&e), error.code);
                bytes.into()
            }
        };
        if ours {
            call.finish(bytes).await;
        }
    }

    /// A 2026-07-28 call that may answer `input_required`: the upstream request
    /// runs in a task of its own, so it can outlive this round (the bridge parks
    /// it when the backend asks the host something).
    async fn run_modern(self: Arc<Self>, ctx: RequestContext, call: Arc<HostCall>, up: Upstream) {
        call.allow_asks();
        let up = Arc::new(up);
        let task = {
            let (me, call, up) = (self.clone(), call.clone(), up.clone());
            tokio::spawn(async move { me.call_backend(&call, &up).await })
        };
        let principal = match &call.host {
            Host::Modern(m) => m.principal.clone(),
            Host::Legacy(_) => None,
        };
        let id = call.id.clone();
        let cont = self.bridge.continuation(call, task, up, principal.as_ref());
        self.drive(ctx, cont, id).await;
    }

    /// One round of a bridged call: the backend's answer ends it; a backend
    /// request for the host parks the call and answers `input_required`; the host
    /// closing its stream cancels it.
    async fn drive(&self, ctx: RequestContext, mut cont: Continuation, id: Id) {
        enum Event {
            Done(Result<RawJson, BackendError>),
            Asked,
            Gone,
        }
        let event = {
            let _upstream = ctx.upstream_call();
            tokio::select! {
                done = &mut cont.task => Event::Done(done.unwrap_or(Err(BackendError::Cancelled))),
                () = cont.call.asked() => Event::Asked,
                () = cont.call.host_gone() => Event::Gone,
            }
        };
        match event {
            Event::Done(outcome) => {
                let (call, up) = (cont.call.clone(), cont.upstream.clone());
                self.finish_call(ctx, &call, &up, &id, outcome, true, None)
                    .await;
            }
            Event::Asked => {
                // Backends often ask several things at once: one round for all.
                tokio::time::sleep(GATHER).await;
                let asks = cont.call.take_asks();
                self.input_required(ctx, cont, &id, asks).await;
            }
            Event::Gone => {
                bridge::abandon(cont, "the client closed its response stream");
                ctx.finish(Outcome::Cancelled);
            }
        }
    }

    /// Parks the call and answers its host `input_required`.
    async fn input_required(
        &self,
        ctx: RequestContext,
        cont: Continuation,
        id: &Id,
        asks: Vec<Ask>,
    ) {
        let call = cont.call.clone();
        let result = self.bridge.park(cont, asks);
        ctx.finish(Outcome::InputRequired);
        call.finish(jsonrpc::result_value_bytes(id, &result).into())
            .await;
    }

    /// A retry of a parked call (`requestState` and `inputResponses` in its
    /// params): the pending backend requests get the host's answers, missing
    /// ones are asked again, and the call goes on, answering on this request.
    pub(super) fn resume(
        self: &Arc<Self>,
        mut ctx: RequestContext,
        host: &Host,
        id: &Id,
        method: &Method,
        params: &Value,
    ) -> Reply {
        let principal = match host {
            Host::Modern(m) => m.principal.as_ref(),
            Host::Legacy(_) => None,
        };
        let state = params
            .get("requestState")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut cont = match self.bridge.resume(state, method, params, principal) {
            Ok(c) => c,
            Err(e) => {
                let mut error = e.to_error_object();
                shape_error(&mut error, host.version());
                let bytes: bytes::Bytes = jsonrpc::error_bytes(Some(id), &error).into();
                ctx.set_bytes_out(bytes.len());
                ctx.finish_error(Outcome::of(&e), error.code);
                return Reply::Now(bytes);
            }
        };
        let missing = cont.answer(params.get("inputResponses").and_then(Value::as_object));
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        cont.call
            .rebind(tx, jsonrpc::progress_token(Some(params)).cloned());
        let me = self.clone();
        let id = id.clone();
        let span = tracing::Span::current();
        let task = async move {
            if missing > 0 {
                // Still missing answers: a new input_required, not an error.
                me.input_required(ctx, cont, &id, Vec::new()).await;
            } else {
                me.drive(ctx, cont, id).await;
            }
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
        Reply::Stream(rx)
    }

    /// [`Dispatch::call_backend`], given up when a modern host's response stream
    /// closes: that is its cancellation, and the backend is told
    /// (`notifications/cancelled`, MCP 2026-07-28 basic/patterns/cancellation).
    async fn call_until_host_gone(
        &self,
        call: &Arc<HostCall>,
        up: &Upstream,
    ) -> Result<RawJson, BackendError> {
        if matches!(call.host, Host::Legacy(_)) {
            return self.call_backend(call, up).await;
        }
        // Pinned outside the select, so the upstream request is still pending
        // (and its cancel is sent) when the host is found gone.
        let backend = self.call_backend(call, up);
        tokio::pin!(backend);
        tokio::select! {
            outcome = &mut backend => outcome,
            () = call.host_gone() => {
                if let Some((conn, id)) = call.mark_cancelled() {
                    conn.cancel(id, Some("the client closed its response stream"));
                }
                Err(BackendError::Cancelled)
            }
        }
    }

    /// The rounds of a legacy session's call whose 2026-07-28 backend answered
    /// `first` (`input_required`): the host is asked, the backend retried, until
    /// its final answer or a clean failure ([`shim`]).
    async fn shim(
        &self,
        ctx: &RequestContext,
        call: &Arc<HostCall>,
        up: &Upstream,
        first: RawJson,
    ) -> Result<RawJson, BackendError> {
        let retry = |responses, state| {
            let params = shim::retry_params(&up.params, responses, state);
            async move {
                let _upstream = ctx.upstream_call();
                self.send_upstream(call, up, Cow::Owned(params.into()))
                    .await
            }
        };
        let leg = self.bridge.ttl();
        match shim::rounds(&self.relay, call, first, leg, retry).await {
            Ok(raw) => Ok(raw),
            Err(ShimError::Backend(e)) => Err(e),
            Err(ShimError::Failed(why)) => {
                let b = &self.catalog.backend(up.backend).spec.name;
                tracing::info!(backend = %b, method = %up.method, cause = %why, "input_required not completed for a 2025-era session");
                shim::failed(&why, up.method == Method::ToolsCall)
            }
        }
    }

    /// Sends the upstream request on the connection that serves the host and
    /// waits for its answer, within the backend's concurrency limit.
    async fn call_backend(
        &self,
        call: &Arc<HostCall>,
        up: &Upstream,
    ) -> Result<RawJson, BackendError> {
        self.send_upstream(call, up, Cow::Borrowed(&up.params))
            .await
    }

    /// [`Dispatch::call_backend`] with `params` in place of the call's own (a
    /// shimmed retry's).
    async fn send_upstream(
        &self,
        call: &Arc<HostCall>,
        up: &Upstream,
        params: Cow<'_, Params>,
    ) -> Result<RawJson, BackendError> {
        let b = self.catalog.backend(up.backend);
        let _permit = b.acquire().await?;
        let conn = self
            .supervisor
            .connection_for(up.backend, &call.host)
            .await?;
        // A host cancel that came while the connection was being set up found no
        // upstream request to cancel: do not start one now.
        if let Host::Legacy(session) = &call.host
            && !session.is_current_call(&call.id, call)
        {
            return Err(BackendError::Cancelled);
        }
        let timeout = conn.timeout();
        let caller: Arc<dyn Caller> = call.clone();
        conn.request_with(&up.method, Some(params), Some(caller), timeout)
            .await
    }

    /// The backend's result in the host's namespace and revision; a created task
    /// is registered with the session (and returned: exposed id, route).
    fn shape_result(
        &self,
        host: &Host,
        up: &Upstream,
        raw: RawJson,
        marks: Marks,
    ) -> (RawJson, Option<(String, TaskRoute)>) {
        let b = self.catalog.backend(up.backend);
        let raw = rewrite_result(raw, up.kind, &b.uri_prefix, host.version(), marks);
        match (host, &up.task) {
            (Host::Modern(_), _) => (
                complete_raw_for_modern(raw, up.kind == super::ResultKind::Resource),
                None,
            ),
            (_, Some(exposed)) => (super::tasks::expose_task_result(raw, exposed), None),
            (Host::Legacy(session), None) if up.creates_task() => {
                self.register_created_task(session, &b.spec.name, up.backend, raw)
            }
            (Host::Legacy(_), None) => (raw, None),
        }
    }
    /// After a task-augmented `tools/call`: the `CreateTaskResult`'s task id is
    /// namespaced and registered with the session; statuses that arrived before
    /// it are delivered now.
    fn register_created_task(
        &self,
        session: &Session,
        backend_name: &str,
        backend: usize,
        raw: RawJson,
    ) -> (RawJson, Option<(String, TaskRoute)>) {
        let Ok(mut v) = raw.parse::<Value>() else {
            return (raw, None);
        };
        let Some(Value::String(id)) = v.pointer_mut("/task/taskId") else {
            return (raw, None);
        };
        let exposed = names::expose_id(backend_name, id);
        // The process that ran the call (a stdio child holds its tasks).
        let process = (self.supervisor.live_connection(backend, session))
            .and_then(|c| self.supervisor.task_process(&c));
        let route = TaskRoute {
            backend: backend_name.to_owned(),
            original: id.clone(),
            process,
        };
        session.add_task(&exposed, route.clone());
        for mut status in self.relay.early_statuses().take(backend, id) {
            status["taskId"] = exposed.clone().into();
            let bytes = jsonrpc::notification_bytes(Method::TaskStatus.as_str(), Some(&status));
            session.send_unrelated(bytes.into());
        }
        *id = exposed.clone();
        (
            RawJson::from_value(&v).unwrap_or(raw),
            Some((exposed, route)),
        )
    }
}

impl Upstream {
    /// Whether the call may answer `input_required` (MCP 2026-07-28 mrtr: only
    /// `tools/call`, `resources/read` and `prompts/get`).
    pub(super) fn may_ask(&self) -> bool {
        matches!(
            self.method,
            Method::ToolsCall | Method::ResourcesRead | Method::PromptsGet
        )
    }

    /// Whether this is a task-augmented `tools/call` (its result is a
    /// `CreateTaskResult`, MCP 2025-11-25 basic/utilities/tasks).
    fn creates_task(&self) -> bool {
        self.kind == super::ResultKind::ToolCall
            && self.task.is_none()
            && !self.plain
            && self.params.get("task").is_some()
    }
}

/// Whether a `tools/call` result reports a tool error (`"isError": true`,
/// MCP 2025-11-25 server/tools, error handling).
fn is_tool_error(raw: &RawJson) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    raw.parse::<Flag>().is_ok_and(|f| f.is_error)
}
