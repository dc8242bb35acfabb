//! Host requests: answered by the gateway (ping, lists, setLevel) or routed to the
//! backend that owns the named tool, prompt or resource.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Router;
use super::rewrite::{ResultKind, rewrite_result};
use super::view::ListKind;
use crate::backend::BackendError;
use crate::jsonrpc::{self, ErrorObject, Id, Request};
use crate::metrics::{Metrics, Outcome};
use crate::protocol::ProtocolVersion;
use crate::session::{HostCall, LOG_LEVELS, Outbound, Session};

/// How the answer to a host request is delivered.
pub enum Reply {
    /// The complete JSON-RPC response.
    Now(Bytes),
    /// Messages related to the request, ending with [`Outbound::Final`]; the
    /// channel closes without a final message when the host cancelled.
    Stream(mpsc::Receiver<Outbound>),
}

fn ok(id: &Id, result: &Value) -> Reply {
    Reply::Now(jsonrpc::result_value_bytes(id, result).into())
}

fn err(id: &Id, code: i64, message: impl Into<String>) -> Reply {
    Reply::Now(jsonrpc::error_bytes(Some(id), &ErrorObject::new(code, message)).into())
}

fn str_param<'a>(params: &'a Value, key: &str) -> Option<&'a str> {
    params.get(key).and_then(Value::as_str)
}

impl Router {
    /// Answers or routes one host request on `session`. Requests answered by the
    /// gateway itself are counted here; routed ones when their answer arrives.
    pub async fn handle_request(self: &Arc<Self>, session: &Arc<Session>, req: Request) -> Reply {
        let started = tokio::time::Instant::now();
        let method = req.method.clone();
        let reply = self.route_request(session, req).await;
        if let Reply::Now(bytes) = &reply {
            let outcome = if is_error_response(bytes) {
                Outcome::Error
            } else {
                Outcome::Ok
            };
            if outcome == Outcome::Ok && ListKind::from_method(&method).is_some() {
                self.metrics.list_cache.with_label_values(&["hit"]).inc();
            }
            let secs = started.elapsed().as_secs_f64();
            self.metrics.observe_request(&method, "none", outcome, secs);
        }
        reply
    }

    async fn route_request(self: &Arc<Self>, session: &Arc<Session>, req: Request) -> Reply {
        let Request { id, method, params } = req;
        let params = params.unwrap_or_else(|| json!({}));
        if let Some(kind) = ListKind::from_method(&method) {
            return self.list(session, &id, kind, &params);
        }
        match method.as_str() {
            "ping" => ok(&id, &json!({})),
            "tools/call" | "prompts/get" => self.call_named(session, id, &method, params),
            "resources/read" => self.call_uri(session, id, &method, params),
            "resources/subscribe" | "resources/unsubscribe" => {
                self.subscription(session, &id, &method, &params).await
            }
            "completion/complete" => self.complete(session, id, params),
            "logging/setLevel" => self.set_level(session, &id, &params).await,
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                self.task_call(session, id, &method, params)
            }
            "tasks/list" => self.task_list(session, &id).await,
            "initialize" => err(
                &id,
                jsonrpc::INVALID_REQUEST,
                "session is already initialized",
            ),
            _ => err(
                &id,
                jsonrpc::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            ),
        }
    }

    fn list(&self, session: &Session, id: &Id, kind: ListKind, params: &Value) -> Reply {
        let host: ProtocolVersion = session.version;
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return err(id, jsonrpc::INVALID_PARAMS, "cursor must be a string"),
        };
        let view = self.view_for(session);
        match view.page(kind, cursor, host) {
            Some(page) => Reply::Now(jsonrpc::result_bytes(id, page).into()),
            None => err(id, jsonrpc::INVALID_PARAMS, "Invalid or expired cursor"),
        }
    }

    /// `tools/call` and `prompts/get`: route by exposed name.
    fn call_named(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: Id,
        method: &str,
        mut params: Value,
    ) -> Reply {
        let Some(name) = str_param(&params, "name") else {
            return err(&id, jsonrpc::INVALID_PARAMS, "params.name must be a string");
        };
        let view = self.view_for(session);
        let (table, what, kind) = if method == "tools/call" {
            (&view.tools, "tool", ResultKind::ToolCall)
        } else {
            (&view.prompts, "prompt", ResultKind::Prompt)
        };
        tracing::Span::current().record("tool", name);
        let Some(route) = table.get(name) else {
            return err(
                &id,
                jsonrpc::INVALID_PARAMS,
                format!("Unknown {what}: {name}"),
            );
        };
        let backend = route.backend;
        params["name"] = route.original.clone().into();
        if kind == ResultKind::ToolCall
            && let Some(o) = self
                .backends
                .at(backend)
                .tools
                .override_for(&route.original)
        {
            super::curation::inject(&mut params, o);
        }
        self.forward(session, id, backend, method, params, kind)
    }

    /// `resources/read`, `subscribe`, `unsubscribe`: route by exposed URI.
    fn call_uri(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: Id,
        method: &str,
        mut params: Value,
    ) -> Reply {
        let Some(uri) = str_param(&params, "uri") else {
            return err(&id, jsonrpc::INVALID_PARAMS, "params.uri must be a string");
        };
        let Some((backend, original)) = self.view_for(session).route_uri(uri) else {
            let e = ErrorObject::new(jsonrpc::RESOURCE_NOT_FOUND, "Resource not found")
                .with_data(json!({ "uri": uri }));
            return Reply::Now(jsonrpc::error_bytes(Some(&id), &e).into());
        };
        params["uri"] = original.into();
        let kind = if method == "resources/read" {
            ResultKind::Resource
        } else {
            ResultKind::Opaque
        };
        self.forward(session, id, backend, method, params, kind)
    }

    /// `completion/complete`: `ref/prompt` by name, `ref/resource` by template URI.
    fn complete(self: &Arc<Self>, session: &Arc<Session>, id: Id, mut params: Value) -> Reply {
        let view = self.view_for(session);
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
                return err(
                    &id,
                    jsonrpc::INVALID_PARAMS,
                    "params.ref must be ref/prompt or ref/resource",
                );
            }
        };
        let Some((backend, field, original)) = target else {
            return err(&id, jsonrpc::INVALID_PARAMS, "Unknown reference");
        };
        let has_completions = self
            .backends
            .at(backend)
            .catalog()
            .is_some_and(|c| c.init.has("completions"));
        if !has_completions {
            // What a server without the capability answers (MCP server/utilities/completion).
            return ok(
                &id,
                &json!({"completion": {"values": [], "hasMore": false}}),
            );
        }
        params["ref"][field] = original.into();
        self.forward(
            session,
            id,
            backend,
            "completion/complete",
            params,
            ResultKind::Opaque,
        )
    }

    /// `logging/setLevel`: kept on the session (messages below it are not relayed)
    /// and sent to the session's own backend connections that log.
    async fn set_level(&self, session: &Arc<Session>, id: &Id, params: &Value) -> Reply {
        let Some(level) = str_param(params, "level").filter(|l| LOG_LEVELS.contains(l)) else {
            return err(
                id,
                jsonrpc::INVALID_PARAMS,
                "params.level must be a log level",
            );
        };
        session.set_log_level(level);
        let slots: Vec<_> = session
            .upstreams
            .lock()
            .map(|u| u.values().cloned().collect())
            .unwrap_or_default();
        for conn in slots.iter().filter_map(|s| s.current()) {
            if conn.info().is_some_and(|i| i.has("logging")) {
                let params = json!({ "level": level });
                tokio::spawn(async move {
                    let timeout = conn.timeout();
                    if let Err(e) = conn
                        .request("logging/setLevel", Some(params), None, timeout)
                        .await
                    {
                        tracing::debug!(backend = %conn.backend, cause = %e, "logging/setLevel refused");
                    }
                });
            }
        }
        ok(id, &json!({}))
    }

    /// Sends a request to backend `backend` on behalf of the host and streams the
    /// related messages and the rewritten answer back. The upstream call runs in
    /// its own task: a host that disconnects does not cancel it (MCP 2025-11-25
    /// transports: a disconnect is not a cancellation).
    fn forward(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: Id,
        backend: usize,
        method: &str,
        params: Value,
        kind: ResultKind,
    ) -> Reply {
        self.forward_with(session, id, backend, method, params, kind, None)
    }

    /// [`Router::forward`], for a request about the task exposed as `task`
    /// (`tasks/get|result|cancel`), whose result names that task.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_with(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: Id,
        backend: usize,
        method: &str,
        params: Value,
        kind: ResultKind,
        task: Option<String>,
    ) -> Reply {
        let creates_task =
            kind == ResultKind::ToolCall && task.is_none() && params.get("task").is_some();
        let (tx, rx) = mpsc::channel(64);
        let token = jsonrpc::progress_token(Some(&params)).cloned();
        let call = Arc::new(HostCall::new(session.clone(), id.clone(), token, tx));
        {
            let Ok(mut inflight) = session.inflight.lock() else {
                return err(&id, jsonrpc::INTERNAL_ERROR, "session state poisoned");
            };
            if inflight.contains_key(&id) {
                return err(
                    &id,
                    jsonrpc::INVALID_REQUEST,
                    "request id is already in use by a request in flight",
                );
            }
            inflight.insert(id.clone(), call.clone());
        }
        let router = self.clone();
        let session = session.clone();
        let method = method.to_owned();
        let started = tokio::time::Instant::now();
        let span = tracing::Span::current();
        span.record("backend", &*self.backends.at(backend).spec.name);
        let task = async move {
            let name = router.backends.at(backend).spec.name.clone();
            let inflight = router.metrics.upstream_inflight.with_label_values(&[&name]);
            inflight.inc();
            let upstream_started = tokio::time::Instant::now();
            let permit = router.backends.at(backend).acquire().await;
            let busy = permit.is_err();
            if busy {
                router
                    .metrics
                    .rejections
                    .with_label_values(&["backend_busy"])
                    .inc();
            }
            let outcome = match permit {
                Err(e) => Err(e),
                Ok(_permit) => match router.connection_for(backend, &session).await {
                    // A host cancel that came while the connection was being set
                    // up found no upstream request to cancel: do not start one now.
                    Ok(_) if !still_wanted(&session, &id, &call) => Err(BackendError::Cancelled),
                    Ok(conn) => {
                        let timeout = conn.timeout();
                        conn.request(&method, Some(params), Some(call.clone()), timeout)
                            .await
                    }
                    Err(e) => Err(e),
                },
            };
            inflight.dec();
            router
                .metrics
                .upstream_timer(&name)
                .observe(upstream_started.elapsed().as_secs_f64());
            let class = match &outcome {
                Ok(_) => Outcome::Ok,
                // Refused by the gateway's own limit: counted as a rejection above,
                // not as a failure of the backend.
                Err(_) if busy => Outcome::Unavailable,
                Err(e) => classify(&router.metrics, &name, e),
            };
            router
                .metrics
                .observe_request(&method, &name, class, started.elapsed().as_secs_f64());
            let ours = session
                .inflight
                .lock()
                .is_ok_and(|mut m| m.remove(&id).is_some());
            let bytes = match outcome {
                Err(BackendError::Cancelled) => return,
                Ok(raw) => {
                    let prefix = &router.backends.at(backend).uri_prefix;
                    let raw = match &task {
                        Some(exposed) => {
                            Router::expose_task_result(raw, kind, prefix, &session, exposed)
                        }
                        None => rewrite_result(raw, kind, prefix, session.version),
                    };
                    let raw = if creates_task {
                        router.register_created_task(&session, backend, raw)
                    } else {
                        raw
                    };
                    jsonrpc::result_bytes(&id, &raw)
                }
                Err(e) => {
                    let name = &router.backends.at(backend).spec.name;
                    tracing::debug!(backend = %name, method, cause = %e, "backend call failed");
                    let mut error = e.to_error_object();
                    namespace_elicitation_ids(&mut error, name);
                    expose_error_uri(&mut error, &router.backends.at(backend).uri_prefix);
                    jsonrpc::error_bytes(Some(&id), &error)
                }
            };
            tracing::debug!(
                outcome = class.as_str(),
                ms = started.elapsed().as_millis() as u64,
                "request finished"
            );
            if ours {
                call.finish(bytes.into()).await;
            }
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
        Reply::Stream(rx)
    }
}

/// `URLElicitationRequiredError` (-32042, MCP 2025-11-25 client/elicitation): the
/// `elicitationId`s in `data.elicitations[]` are namespaced by backend like those
/// of relayed `elicitation/create` requests.
fn namespace_elicitation_ids(error: &mut ErrorObject, backend: &str) {
    if error.code != -32042 {
        return;
    }
    let Some(list) = error
        .data
        .as_mut()
        .and_then(|d| d.get_mut("elicitations"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for e in list {
        if let Some(Value::String(id)) = e.get_mut("elicitationId") {
            *id = format!("{backend}:{id}");
        }
    }
}

/// A backend's error about a resource (`-32002` "Resource not found" carries
/// `data.uri`, MCP 2025-11-25 server/resources "Error Handling") names the URI
/// as the host knows it, with the backend's prefix, never the backend's own.
fn expose_error_uri(error: &mut ErrorObject, uri_prefix: &str) {
    if uri_prefix.is_empty() {
        return;
    }
    if let Some(Value::String(uri)) = error.data.as_mut().and_then(|d| d.get_mut("uri")) {
        *uri = super::names::expose_uri(uri_prefix, uri);
    }
}

/// Whether a serialized response is an error (its top-level `error` member comes
/// before any `result`; JSON strings cannot contain an unescaped `"`, so the
/// first match is the top-level key).
fn is_error_response(bytes: &[u8]) -> bool {
    let window = &bytes[..bytes.len().min(512)];
    let find = |needle: &[u8]| window.windows(needle.len()).position(|w| w == needle);
    match (find(b",\"error\":"), find(b",\"result\":")) {
        (Some(e), Some(r)) => e < r,
        (Some(_), None) => true,
        _ => false,
    }
}

/// The outcome of a failed backend call, counting it by class.
fn classify(metrics: &Metrics, backend: &str, e: &BackendError) -> Outcome {
    let (outcome, class) = match e {
        BackendError::Rpc(_) => (Outcome::RpcError, None),
        BackendError::Cancelled => (Outcome::Cancelled, None),
        BackendError::Timeout { .. } => (Outcome::Timeout, Some("timeout")),
        BackendError::Unavailable { .. } => (Outcome::Unavailable, Some("closed")),
        BackendError::Protocol { .. } => (Outcome::Unavailable, Some("protocol")),
        BackendError::HttpStatus { status, .. } if *status >= 500 => {
            (Outcome::Unavailable, Some("http_5xx"))
        }
        BackendError::HttpStatus { .. } => (Outcome::Unavailable, Some("http_4xx")),
    };
    if let Some(class) = class {
        metrics
            .upstream_errors
            .with_label_values(&[backend, class])
            .inc();
    }
    outcome
}

/// Whether host request `id` is still in flight as `call` (not cancelled).
fn still_wanted(session: &Session, id: &Id, call: &Arc<HostCall>) -> bool {
    session
        .inflight
        .lock()
        .is_ok_and(|m| m.get(id).is_some_and(|c| Arc::ptr_eq(c, call)))
}
