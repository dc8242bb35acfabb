//! Relaying between hosts and backends outside plain request/response: backend
//! notifications and server→client requests to exactly the right host, and the
//! host's notifications and answers back to exactly the right backend request
//! (DESIGN decisions 3–4; MCP 2025-11-25 checklist §8.1–8.4).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Router;
use crate::backend::Connection;
use crate::jsonrpc::{self, ErrorObject, Id, Notification, Request, Response};
use crate::session::{ClientRequest, HostCall, Session};

impl Router {
    fn backend_index(&self, conn: &Connection) -> Option<usize> {
        self.backends.by_name(&conn.backend).map(|b| b.index)
    }

    /// A notification from a backend.
    pub(super) fn on_backend_notification(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<HostCall>>,
        n: Notification,
    ) {
        let Notification { method, params } = n;
        let mut params = params.unwrap_or_else(|| json!({}));
        match method.as_str() {
            "notifications/progress" => {
                let Some(call) = call else {
                    tracing::debug!(backend = %conn.backend, "progress for a token we never gave; dropped");
                    return;
                };
                let (Some(token), Some(progress)) = (
                    call.progress_token.clone(),
                    params.get("progress").and_then(Value::as_f64),
                ) else {
                    return;
                };
                if !call.accept_progress(progress) {
                    tracing::debug!(backend = %conn.backend, progress, "non-increasing progress dropped");
                    return;
                }
                params["progressToken"] = token;
                call.send_related(jsonrpc::notification_bytes(&method, Some(&params)).into());
            }
            "notifications/message" => {
                let logger = match params.get("logger").and_then(Value::as_str) {
                    Some(l) => format!("{}/{l}", conn.backend),
                    None => conn.backend.to_string(),
                };
                params["logger"] = logger.into();
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info")
                    .to_owned();
                let bytes = jsonrpc::notification_bytes(&method, Some(&params));
                match (call, conn.owner_session()) {
                    (Some(call), _) => {
                        if call.session.wants_log(&level) {
                            call.send_related(bytes.into());
                        }
                    }
                    (None, Some(session)) => {
                        if session.wants_log(&level) {
                            session.send_unrelated(bytes.into());
                        }
                    }
                    // A shared connection cannot tell whose log this is.
                    (None, None) => {
                        tracing::debug!(backend = %conn.backend, "unattributable log message dropped")
                    }
                }
            }
            "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed" => {
                if let Some(idx) = self.backend_index(conn) {
                    self.schedule_refresh(idx);
                }
            }
            "notifications/resources/updated" => {
                if let Some(idx) = self.backend_index(conn) {
                    self.resource_updated(conn, idx, params);
                }
            }
            "notifications/cancelled" => self.backend_cancelled(conn, call, &params),
            "notifications/tasks/status" => {
                let Some(idx) = self.backend_index(conn) else {
                    return;
                };
                let original = params
                    .get("taskId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let hint = call
                    .as_ref()
                    .map(|c| c.session.clone())
                    .or_else(|| conn.owner_session());
                let Some((session, exposed)) = self.task_owner(idx, &original, hint) else {
                    // Possibly a task whose CreateTaskResult is still on its way:
                    // held until it is registered (bounded), else dropped.
                    tracing::debug!(backend = %conn.backend, "status of a task no session owns (yet); held");
                    self.early_status.hold(idx, &original, params);
                    return;
                };
                params["taskId"] = exposed.into();
                let bytes = jsonrpc::notification_bytes(&method, Some(&params));
                match call {
                    Some(c) if Arc::ptr_eq(&c.session, &session) => {
                        c.send_related(bytes.into());
                    }
                    _ => {
                        session.send_unrelated(bytes.into());
                    }
                }
            }
            "notifications/elicitation/complete" => {
                if let Some(Value::String(id)) = params.get_mut("elicitationId") {
                    *id = format!("{}:{id}", conn.backend);
                }
                if let Some(session) = call
                    .map(|c| c.session.clone())
                    .or_else(|| conn.owner_session())
                {
                    session
                        .send_unrelated(jsonrpc::notification_bytes(&method, Some(&params)).into());
                }
            }
            _ => {
                if let Some(session) = call
                    .map(|c| c.session.clone())
                    .or_else(|| conn.owner_session())
                {
                    session
                        .send_unrelated(jsonrpc::notification_bytes(&method, Some(&params)).into());
                }
            }
        }
    }

    /// A backend cancels a server→client request it sent: forward with our id.
    fn backend_cancelled(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<HostCall>>,
        params: &Value,
    ) {
        let Some(upstream) = params.get("requestId").and_then(Id::from_value) else {
            return;
        };
        let Some(session) = call
            .map(|c| c.session.clone())
            .or_else(|| conn.owner_session())
        else {
            return;
        };
        let found = session.client_requests.lock().ok().and_then(|mut m| {
            let key = m
                .iter()
                .find(|(_, r)| r.upstream_id == upstream && r.conn.ptr_eq(&Arc::downgrade(conn)))
                .map(|(k, _)| k.clone())?;
            m.remove(&key).map(|_| key)
        });
        if let Some(ours) = found {
            let mut p = params.clone();
            p["requestId"] = ours.to_value();
            session.send_unrelated(
                jsonrpc::notification_bytes("notifications/cancelled", Some(&p)).into(),
            );
        }
    }

    /// A request from a backend (server→client): answered locally (`ping`) or
    /// relayed to the host session it belongs to, if that host declared the
    /// capability it needs.
    pub(super) fn on_backend_request(
        &self,
        conn: &Arc<Connection>,
        call: Option<&Arc<HostCall>>,
        req: &Request,
    ) {
        let refuse = |code: i64, msg: &str| {
            conn.respond(&req.id, Err(&ErrorObject::new(code, msg)));
        };
        let needed = match req.method.as_str() {
            "ping" => {
                conn.respond(&req.id, Ok(&json!({})));
                return;
            }
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return refuse(jsonrpc::METHOD_NOT_FOUND, "Method not found"),
        };
        let session = match (call, conn.owner_session()) {
            (Some(c), _) => c.session.clone(),
            (None, Some(s)) => s,
            (None, None) => {
                return refuse(
                    jsonrpc::METHOD_NOT_FOUND,
                    "this backend connection is shared by several clients; client requests cannot be routed",
                );
            }
        };
        if !session.has_capability(needed) {
            return refuse(
                jsonrpc::METHOD_NOT_FOUND,
                &format!("Client does not support {needed}"),
            );
        }
        let mut params = req.params.clone();
        if let Some(p) = params.as_mut() {
            super::tasks::expose_related_task(p, &conn.backend);
            if let Some(Value::String(id)) = p.get_mut("elicitationId") {
                *id = format!("{}:{id}", conn.backend);
            }
        }
        if needed == "elicitation" && !elicitation_mode_declared(&session, params.as_ref()) {
            return refuse(
                jsonrpc::INVALID_PARAMS,
                "Client does not support this elicitation mode",
            );
        }
        let ours = session.next_client_id();
        if let Ok(mut m) = session.client_requests.lock() {
            m.insert(
                ours.clone(),
                ClientRequest {
                    conn: Arc::downgrade(conn),
                    upstream_id: req.id.clone(),
                },
            );
        }
        let bytes = jsonrpc::request_bytes(&ours, &req.method, params.as_ref());
        let delivered = match call {
            Some(c) => c.send_related(bytes.into()),
            None => session.send_unrelated(bytes.into()),
        };
        if !delivered {
            if let Ok(mut m) = session.client_requests.lock() {
                m.remove(&ours);
            }
            return refuse(
                jsonrpc::INTERNAL_ERROR,
                "no open stream to reach the client",
            );
        }
        // Expire before the backend's own call times out, so it can still handle
        // the refusal.
        tokio::spawn(expire_client_request(
            session,
            ours,
            conn.timeout().mul_f64(0.9),
        ));
    }

    /// A notification from the host.
    pub fn handle_notification(&self, session: &Arc<Session>, n: &Notification) {
        match n.method.as_str() {
            "notifications/cancelled" => {
                let id = n
                    .params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(Id::from_value);
                let Some(id) = id else { return };
                let call = session.inflight.lock().ok().and_then(|mut m| m.remove(&id));
                let reason = n
                    .params
                    .as_ref()
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str);
                match call.and_then(|c| c.mark_cancelled()) {
                    Some((conn, upstream)) => conn.cancel(upstream, reason),
                    None => tracing::debug!(%id, "cancel for a request not in flight; ignored"),
                }
            }
            "notifications/roots/list_changed" => {
                let slots: Vec<_> = session
                    .upstreams
                    .lock()
                    .map(|u| u.values().cloned().collect())
                    .unwrap_or_default();
                for conn in slots.iter().filter_map(|s| s.current()) {
                    conn.notify("notifications/roots/list_changed", None);
                }
            }
            _ => {}
        }
    }

    /// The host answers a server→client request: route the answer to the backend
    /// request it belongs to. Unknown or repeated ids are ignored.
    pub fn handle_response(&self, session: &Arc<Session>, r: Response) {
        let Some(id) = r.id else { return };
        let entry = session
            .client_requests
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&id));
        let Some(entry) = entry else {
            tracing::debug!(%id, "answer to an unknown or already answered request; ignored");
            return;
        };
        let Some(conn) = entry.conn.upgrade() else {
            return;
        };
        match r.outcome {
            Ok(raw) => {
                let v = serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null);
                conn.respond(&entry.upstream_id, Ok(&v));
            }
            Err(e) => conn.respond(&entry.upstream_id, Err(&e)),
        }
    }
}

/// URL-mode elicitation needs `elicitation.url`; form mode needs `form` or the
/// empty object (MCP 2025-11-25 client/elicitation).
fn elicitation_mode_declared(session: &Session, params: Option<&Value>) -> bool {
    let caps = session.client_capabilities.get("elicitation");
    let mode = params
        .and_then(|p| p.get("mode"))
        .and_then(Value::as_str)
        .unwrap_or("form");
    let declared = |m: &str| caps.and_then(|c| c.get(m)).is_some();
    let empty = caps
        .and_then(Value::as_object)
        .is_some_and(|o| o.is_empty());
    match mode {
        "url" => declared("url"),
        _ => declared("form") || empty,
    }
}

/// Fails a relayed request the host never answered and tells the host to stop.
async fn expire_client_request(session: Arc<Session>, ours: Id, after: std::time::Duration) {
    tokio::select! {
        _ = tokio::time::sleep(after) => {}
        _ = session.closed.cancelled() => {}
    }
    let entry = session
        .client_requests
        .lock()
        .ok()
        .and_then(|mut m| m.remove(&ours));
    let Some(entry) = entry else { return };
    if let Some(conn) = entry.conn.upgrade() {
        conn.respond(
            &entry.upstream_id,
            Err(&ErrorObject::new(
                jsonrpc::INTERNAL_ERROR,
                "the client did not answer in time",
            )),
        );
    }
    let p = json!({"requestId": ours.to_value(), "reason": "timed out"});
    session.send_unrelated(jsonrpc::notification_bytes("notifications/cancelled", Some(&p)).into());
}
