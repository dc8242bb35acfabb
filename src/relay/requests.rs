//! Server→client requests (`sampling/createMessage`, `elicitation/create`,
//! `roots/list`) relayed to the host they belong to, the host's answers routed
//! back to the backend request, and the host's own notifications (cancel, roots
//! changed) delivered to the backend requests and connections they concern
//! (MCP 2025-11-25 client/sampling, client/elicitation, client/roots,
//! basic/utilities/cancellation).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Relay, notification};
use crate::backend::Connection;
use crate::jsonrpc::{self, ErrorObject, Id, Response};
use crate::mcp::{Message, Method, Notification, Request, input, names};
use crate::session::{Ask, ClientRequest, HostAnswer, HostCall, Session};

impl Relay {
    /// A backend cancels a server→client request it sent: forward with our id.
    pub(super) fn backend_cancelled(
        &self,
        conn: &Arc<Connection>,
        call: Option<&Arc<HostCall>>,
        params: &Value,
    ) {
        let Some(upstream) = params.get("requestId").and_then(Id::from_value) else {
            return;
        };
        let Some(session) = self.session_of(conn, call) else {
            return;
        };
        if let Some(ours) = session.take_client_request_from(conn, &upstream) {
            let mut p = params.clone();
            p["requestId"] = ours.to_value();
            session.send_unrelated(notification(&Method::Cancelled, &p));
        }
    }

    /// A request from a backend (server→client): answered locally (`ping`) or
    /// relayed to the host it belongs to, if that host declared the capability it
    /// needs. Refusals are answered to the backend.
    pub(super) fn on_backend_request(
        &self,
        conn: &Arc<Connection>,
        call: Option<&Arc<HostCall>>,
        req: &Request,
    ) {
        if req.method == Method::Ping {
            conn.respond(&req.id, Ok(&json!({})));
            return;
        }
        if let Err(refusal) = self.route_backend_request(conn, call, req) {
            conn.respond(&req.id, Err(&refusal));
        }
    }

    /// Where a server→client request goes: to a 2026-07-28 host's call as an
    /// `Ask` (the bridge), or to the legacy session the connection or call
    /// belongs to.
    ///
    /// Errors: the refusal answered to the backend: -32601 for a method a client
    /// does not serve, a host that did not declare the capability, or a shared
    /// connection with no one call to attribute the request to; -32602 for an
    /// elicitation mode the session did not declare; -32603 (from
    /// [`Relay::relay_to_session`]) when no stream reaches the host.
    fn route_backend_request(
        &self,
        conn: &Arc<Connection>,
        call: Option<&Arc<HostCall>>,
        req: &Request,
    ) -> Result<(), ErrorObject> {
        let refusal = |code: i64, msg: &str| ErrorObject::new(code, msg);
        let Some(needed) = req.method.client_capability() else {
            return Err(refusal(jsonrpc::METHOD_NOT_FOUND, "Method not found"));
        };
        if let Some(call) = call.filter(|c| c.host.session().is_none()) {
            // A 2026-07-28 host never receives a JSON-RPC request on any stream:
            // the request waits for the host's retry (the bridge), if the host
            // declared what it needs in this request.
            bridgeable(call, &req.method, req.params.as_deref())
                .map_err(|why| refusal(jsonrpc::METHOD_NOT_FOUND, why))?;
            call.ask(Ask {
                method: req.method.clone(),
                params: without_elicitation_id(req.params.as_deref().cloned()),
                conn: Arc::downgrade(conn),
                upstream_id: req.id.clone(),
            });
            return Ok(());
        }
        let Some(session) = self.session_of(conn, call) else {
            self.shared_message(conn, req.method.as_str(), false);
            return Err(refusal(
                jsonrpc::METHOD_NOT_FOUND,
                "mcpgate cannot tell which client this request is for: this backend connection is shared and not exactly one client call is in flight on it (configure mode = \"per_session\")",
            ));
        };
        self.shared_message(conn, req.method.as_str(), true);
        if !session.has_capability(needed) {
            return Err(refusal(
                jsonrpc::METHOD_NOT_FOUND,
                &format!("Client does not support {needed}"),
            ));
        }
        let params = exposed_params(conn, req.params.as_deref().cloned());
        if req.method == Method::ElicitationCreate
            && !elicitation_mode_declared(&session, params.as_ref())
        {
            return Err(refusal(
                jsonrpc::INVALID_PARAMS,
                "Client does not support this elicitation mode",
            ));
        }
        self.relay_to_session(conn, call, req, session, params.as_ref())
    }

    /// Puts a backend's request to a legacy session under a fresh host-facing id
    /// (remembered as a `ClientRequest::Backend` for the answer), on the call's
    /// stream when it came during a call, else on the session's unrelated
    /// stream. Unanswered, it is failed to the backend after 0.9 × the
    /// connection's timeout, before the backend's own call times out, so it can
    /// still handle the refusal.
    ///
    /// Errors: -32603 when no open stream reaches the host (nothing is kept).
    fn relay_to_session(
        &self,
        conn: &Arc<Connection>,
        call: Option<&Arc<HostCall>>,
        req: &Request,
        session: Arc<Session>,
        params: Option<&Value>,
    ) -> Result<(), ErrorObject> {
        let ours = self.relayed_id(session.next_client_id());
        let pending = ClientRequest::Backend {
            conn: Arc::downgrade(conn),
            upstream_id: req.id.clone(),
        };
        session.add_client_request(ours.clone(), pending);
        let bytes = jsonrpc::request_bytes(&ours, req.method.as_str(), params);
        let delivered = match call {
            Some(c) => c.send_related(bytes.into()),
            None => session.send_unrelated(bytes.into()),
        };
        if !delivered {
            session.take_client_request(&ours);
            return Err(ErrorObject::new(
                jsonrpc::INTERNAL_ERROR,
                "no open stream to reach the client",
            ));
        }
        let after = conn.timeout().mul_f64(0.9);
        tokio::spawn(expire_client_request(session, ours, after));
        Ok(())
    }

    /// Puts a request of the gateway's own to the legacy session of `call`, on the
    /// call's stream (MCP 2025-11-25 basic/transports: requests related to a
    /// client request go on its POST's SSE stream): an entry of a 2026-07-28
    /// backend's `inputRequests` (the shim, `dispatch/shim.rs`). Only what the
    /// session declared and its revision has (`mcp::input::may_ask`); a URL-mode
    /// elicitation gets an `elicitationId`, which 2025-11-25 requires and
    /// 2026-07-28 dropped. Returns the id the host sees and where its answer will
    /// come (also when it is POSTed to another replica: the id names this one).
    ///
    /// Errors: why the request cannot be put (not a session, not declared, no
    /// open stream). Unanswered entries are removed with
    /// [`Relay::forget_host_request`].
    pub fn ask_host(
        &self,
        call: &HostCall,
        method: &Method,
        params: Option<&Value>,
    ) -> Result<(Id, tokio::sync::oneshot::Receiver<HostAnswer>), String> {
        let Some(session) = call.host.session() else {
            return Err("not a session".into());
        };
        if !input::may_ask(
            session.version(),
            session.client_capabilities(),
            method,
            params,
        ) {
            return Err(format!(
                "the client did not declare the capability {method} needs (or its revision {} lacks it)",
                session.version()
            ));
        }
        let mut params = params.cloned();
        if let Some(p) = params.as_mut().and_then(Value::as_object_mut)
            && p.get("mode").and_then(Value::as_str) == Some("url")
        {
            p.insert("elicitationId".into(), fresh_elicitation_id().into());
        }
        let ours = self.relayed_id(session.next_client_id());
        let (tx, rx) = tokio::sync::oneshot::channel();
        session.add_client_request(ours.clone(), ClientRequest::Gateway(tx));
        let bytes = jsonrpc::request_bytes(&ours, method.as_str(), params.as_ref());
        if !call.send_related(bytes.into()) {
            session.take_client_request(&ours);
            return Err("no open stream to reach the client".into());
        }
        Ok((ours, rx))
    }

    /// Forgets a request put with [`Relay::ask_host`] that will not be waited
    /// for; `why`: tell the host to stop (`notifications/cancelled`, MCP
    /// basic/utilities/cancellation), `None` when it is moot (the host cancelled
    /// the call itself). A request already answered is left alone.
    pub fn forget_host_request(&self, session: &Session, ours: &Id, why: Option<&str>) {
        if session.take_client_request(ours).is_none() {
            return;
        }
        if let Some(reason) = why {
            let p = json!({"requestId": ours.to_value(), "reason": reason});
            session.send_unrelated(notification(&Method::Cancelled, &p));
        }
    }

    /// A notification from the host: a cancel reaches the backend request the host
    /// call became (on whichever replica runs it); a roots change reaches the
    /// session's own connections (and, with a shared store, those of the
    /// owner of its per-session children when that is another replica).
    pub fn handle_notification(&self, session: &Arc<Session>, n: &Notification) {
        match n.method {
            Method::Cancelled => {
                let Some(params) = n.params.as_ref() else {
                    return;
                };
                if !Self::cancel_here(session, params) {
                    self.cancel_elsewhere(session, params);
                }
            }
            Method::RootsListChanged => {
                self.roots_changed(session);
                if !session.is_owned() {
                    self.roots_elsewhere(session);
                }
            }
            _ => {}
        }
    }

    /// Tells `session`'s connections here that its host's roots changed.
    pub fn roots_changed(&self, session: &Session) {
        for conn in session.connections() {
            conn.notify(&Method::RootsListChanged, None);
        }
    }

    /// A roots change for a session whose per-session children may run on
    /// another replica: announced to the others (with a shared store); the
    /// owner tells its children (`supervisor/cluster.rs`).
    fn roots_elsewhere(&self, session: &Session) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let h = session.store_key().to_owned();
        tokio::spawn(async move {
            if store.broadcast_roots(&h).await.is_err() {
                tracing::debug!("roots change not announced: the shared store did not answer");
            }
        });
    }

    /// Cancels the host call `params.requestId` if it runs here; whether it
    /// did (an unreadable cancel counts as done: nobody can act on it).
    pub(super) fn cancel_here(session: &Session, params: &Value) -> bool {
        let Some(v) = params.get("requestId") else {
            return true;
        };
        // A parsed number holds `-0` or `1e3` only by value: the call it names.
        let id = Id::from_value(v).or_else(|| {
            let calls = session.calls().into_iter();
            calls.map(|c| c.id.clone()).find(|id| id.matches_value(v))
        });
        let Some(id) = id else {
            return true;
        };
        let reason = params.get("reason").and_then(Value::as_str);
        match session.take_call(&id).and_then(|c| c.mark_cancelled()) {
            Some((conn, upstream)) => {
                conn.cancel(upstream, reason);
                true
            }
            None => {
                tracing::debug!(%id, "cancel for a request not in flight here");
                false
            }
        }
    }

    /// A cancel for a call this replica does not run: announced to the others
    /// (with a shared store), one of which may run it.
    fn cancel_elsewhere(&self, session: &Session, params: &Value) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let (h, text) = (session.store_key().to_owned(), params.to_string());
        let counter = self
            .metrics
            .cluster_forwarded
            .with_label_values(&["cancel"]);
        tokio::spawn(async move {
            if store.broadcast_cancel(&h, &text).await.is_ok() {
                counter.inc();
            }
        });
    }

    /// The host answers a server→client request: route the answer to the backend
    /// request it belongs to — here, or through the shared store to the replica
    /// that relayed it. Unknown or repeated ids are ignored.
    pub fn handle_response(&self, session: &Arc<Session>, r: Response) {
        let Some(id) = r.id.clone() else { return };
        let Some(entry) = session.take_client_request(&id) else {
            if !self.answer_elsewhere(session, &id, &r) {
                tracing::debug!(%id, "answer to an unknown or already answered request; ignored");
            }
            return;
        };
        let outcome = r
            .outcome
            .map(|raw| raw.parse::<Value>().unwrap_or(Value::Null));
        match entry {
            ClientRequest::Backend { conn, upstream_id } => {
                if let Some(conn) = conn.upgrade() {
                    conn.respond(&upstream_id, outcome.as_ref());
                }
            }
            ClientRequest::Gateway(waiting) => {
                let _ = waiting.send(outcome);
            }
        }
    }

    /// An answer another replica received for a request relayed here
    /// (`message`: the host's JSON-RPC response).
    pub fn answer_forwarded(&self, session: &Arc<Session>, message: &str) {
        match jsonrpc::parse_message(message.as_bytes()) {
            Ok(Message::Response(r)) => self.handle_response(session, r),
            _ => tracing::debug!("a forwarded answer that is not a response; ignored"),
        }
    }

    /// Sends an answer to the replica whose tag `id` carries, if that is
    /// another replica; whether it is. A dead replica's answer is dropped.
    fn answer_elsewhere(&self, session: &Session, id: &Id, r: &Response) -> bool {
        let (Some(store), Id::Num(n)) = (self.shared.clone(), id) else {
            return false;
        };
        let Some(tag) = store.relayed_elsewhere(*n) else {
            return false;
        };
        let message = match &r.outcome {
            Ok(raw) => jsonrpc::result_bytes(id, raw.as_bytes()),
            Err(e) => jsonrpc::error_bytes(Some(id), e),
        };
        let message = String::from_utf8_lossy(&message).into_owned();
        let (h, log_id) = (session.store_key().to_owned(), session.log_id().to_owned());
        let counter = self
            .metrics
            .cluster_forwarded
            .with_label_values(&["answer"]);
        tokio::spawn(async move {
            match store.send_answer(&tag, &h, &message).await {
                Ok(true) => counter.inc(),
                Ok(false) => tracing::info!(session = %log_id, replica = %tag,
                    "answer for a request relayed by a replica that is gone; dropped"),
                Err(_) => tracing::warn!(session = %log_id, replica = %tag,
                    "answer for another replica not sent: the shared store is unavailable"),
            }
        });
        true
    }

    /// The id the host sees for a relayed request: tagged with this replica
    /// when there is a shared store, else the session's counter as it is.
    fn relayed_id(&self, n: Id) -> Id {
        match (&self.shared, n) {
            (Some(store), Id::Num(n)) => Id::Num(store.relayed_id(n)),
            (_, n) => n,
        }
    }
}

/// Whether a backend's server→client request can be put to the 2026-07-28 host of
/// `call`: only a kind this host request declared (`mcp::input::may_ask`: URL
/// elicitation needs `elicitation.url`, tool-enabled sampling `sampling.tools`),
/// and only during a call that may answer `input_required` (`tools/call`,
/// `resources/read`, `prompts/get`; MCP 2026-07-28 basic/patterns/mrtr).
fn bridgeable(
    call: &HostCall,
    method: &Method,
    params: Option<&Value>,
) -> Result<(), &'static str> {
    if !call.may_ask() {
        return Err("the client's request cannot be answered input_required");
    }
    let caps = call.host.client_capabilities();
    if input::may_ask(call.host.version(), caps, method, params) {
        Ok(())
    } else {
        Err("Client does not support this request (not declared in this request's capabilities)")
    }
}

/// A backend's request params in the host's namespace: its related task and its
/// `elicitationId` prefixed with the backend's name, so the host's answer and
/// later notifications route back to it.
fn exposed_params(conn: &Connection, mut params: Option<Value>) -> Option<Value> {
    if let Some(p) = params.as_mut() {
        super::tasks::expose_related_task(p, &conn.backend);
        if let Some(Value::String(id)) = p.get_mut("elicitationId") {
            *id = names::expose_id(&conn.backend, id);
        }
    }
    params
}

/// A URL-mode elicitation without its `elicitationId`: 2026-07-28 has none (the
/// host learns the outcome by retrying).
fn without_elicitation_id(mut params: Option<Value>) -> Option<Value> {
    if let Some(p) = params.as_mut().and_then(Value::as_object_mut) {
        p.remove("elicitationId");
    }
    params
}

/// URL-mode elicitation needs `elicitation.url`; form mode needs `form` or the
/// empty object (MCP 2025-11-25 client/elicitation).
fn elicitation_mode_declared(session: &Session, params: Option<&Value>) -> bool {
    let caps = session.client_capabilities().get("elicitation");
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
        _ = session.ended() => {}
    }
    let Some(ClientRequest::Backend { conn, upstream_id }) = session.take_client_request(&ours)
    else {
        return;
    };
    if let Some(conn) = conn.upgrade() {
        conn.respond(
            &upstream_id,
            Err(&ErrorObject::new(
                jsonrpc::INTERNAL_ERROR,
                "the client did not answer in time",
            )),
        );
    }
    let p = json!({"requestId": ours.to_value(), "reason": "timed out"});
    session.send_unrelated(notification(&Method::Cancelled, &p));
}

/// A fresh `elicitationId` for a URL-mode elicitation put to a 2025-11-25 host
/// (required there; the 2026-07-28 request it comes from has none): 128 random
/// bits, hex.
fn fresh_elicitation_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = getrandom::fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("mcpgate-{hex}")
}
