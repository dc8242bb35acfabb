//! The forward and respond phases: a routed host request becomes an upstream
//! request on the connection that serves the session, in a task of its own (a
//! host that disconnects does not cancel it: MCP 2025-11-25 transports, a
//! disconnect is not a cancellation). Related messages stream to the host as they
//! come; the result is rewritten into the host's namespace and revision.

use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::rewrite::{expose_error, rewrite_result};
use super::{Dispatch, Reply, Upstream};
use crate::backend::{BackendError, Caller};
use crate::error::RpcError;
use crate::jsonrpc::{self, Id};
use crate::mcp::{Method, names};
use crate::request::{Outcome, RequestContext};
use crate::session::{HostCall, Session, TaskRoute};

/// Related messages queued toward the host per call before new ones are dropped.
const CALL_QUEUE: usize = 64;

impl Dispatch {
    /// Starts the upstream request and returns the stream its messages and
    /// answer come on.
    pub(super) fn forward(
        self: &Arc<Self>,
        ctx: RequestContext,
        session: &Arc<Session>,
        id: &Id,
        up: Upstream,
    ) -> Reply {
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        let token = jsonrpc::progress_token(Some(&up.params)).cloned();
        let call = Arc::new(HostCall::new(session.clone(), id.clone(), token, tx));
        if !session.start_call(&call) {
            let e = RpcError::InvalidRequest(
                "request id is already in use by a request in flight".into(),
            );
            ctx.finish(Outcome::of(&e));
            return Reply::Now(jsonrpc::error_bytes(Some(id), &e.to_error_object()).into());
        }
        let me = self.clone();
        let span = tracing::Span::current();
        let task = async move { me.run(ctx, call, up).await };
        tokio::spawn(tracing::Instrument::instrument(task, span));
        Reply::Stream(rx)
    }

    /// The forward task: call the backend, shape the answer, finish the request.
    async fn run(&self, ctx: RequestContext, call: Arc<HostCall>, up: Upstream) {
        let outcome = {
            let _upstream = ctx.upstream_call();
            self.call_backend(&call, &up).await
        };
        let session = &call.session;
        // Ours unless the host cancelled meanwhile (then no answer is due).
        let ours = session.take_call(&call.id).is_some();
        let bytes = match outcome {
            Err(BackendError::Cancelled) => return ctx.finish(Outcome::Cancelled),
            Ok(raw) => {
                ctx.finish(Outcome::Ok);
                let raw = self.shape_result(session, &up, raw);
                jsonrpc::result_bytes(&call.id, &raw)
            }
            Err(e) => {
                let b = self.catalog.backend(up.backend);
                tracing::debug!(backend = %b.spec.name, method = %up.method, cause = %e, "backend call failed");
                ctx.finish(Outcome::of_backend(&e));
                let mut error = e.to_error_object();
                expose_error(&mut error, &b.spec.name, &b.uri_prefix);
                jsonrpc::error_bytes(Some(&call.id), &error)
            }
        };
        if ours {
            call.finish(bytes.into()).await;
        }
    }

    /// Sends the upstream request on the connection that serves the session and
    /// waits for its answer, within the backend's concurrency limit.
    async fn call_backend(
        &self,
        call: &Arc<HostCall>,
        up: &Upstream,
    ) -> Result<Box<RawValue>, BackendError> {
        let b = self.catalog.backend(up.backend);
        let _permit = b.acquire().await?;
        let conn = self
            .supervisor
            .connection_for(up.backend, &call.session)
            .await?;
        // A host cancel that came while the connection was being set up found no
        // upstream request to cancel: do not start one now.
        if !call.session.is_current_call(&call.id, call) {
            return Err(BackendError::Cancelled);
        }
        let timeout = conn.timeout();
        let caller: Arc<dyn Caller> = call.clone();
        conn.request(&up.method, Some(up.params.clone()), Some(caller), timeout)
            .await
    }

    /// The backend's result in the host's namespace and revision; a created task
    /// is registered with the session.
    fn shape_result(&self, session: &Session, up: &Upstream, raw: Box<RawValue>) -> Box<RawValue> {
        let b = self.catalog.backend(up.backend);
        let raw = rewrite_result(raw, up.kind, &b.uri_prefix, session.version());
        match &up.task {
            Some(exposed) => super::tasks::expose_task_result(raw, exposed),
            None if up.creates_task() => {
                self.register_created_task(session, &b.spec.name, up.backend, raw)
            }
            None => raw,
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
        raw: Box<RawValue>,
    ) -> Box<RawValue> {
        let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else {
            return raw;
        };
        let Some(Value::String(id)) = v.pointer_mut("/task/taskId") else {
            return raw;
        };
        let exposed = names::expose_id(backend_name, id);
        let route = TaskRoute {
            backend: backend_name.to_owned(),
            original: id.clone(),
        };
        session.add_task(&exposed, route);
        for mut status in self.relay.early_statuses().take(backend, id) {
            status["taskId"] = exposed.clone().into();
            let bytes = jsonrpc::notification_bytes(Method::TaskStatus.as_str(), Some(&status));
            session.send_unrelated(bytes.into());
        }
        *id = exposed;
        serde_json::value::to_raw_value(&v).unwrap_or(raw)
    }
}

impl Upstream {
    /// Whether this is a task-augmented `tools/call` (its result is a
    /// `CreateTaskResult`, MCP 2025-11-25 basic/utilities/tasks).
    fn creates_task(&self) -> bool {
        self.kind == super::ResultKind::ToolCall
            && self.task.is_none()
            && self.params.get("task").is_some()
    }
}
