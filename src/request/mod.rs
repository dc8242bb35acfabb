//! One host request as it travels through the phases (accept → authenticate →
//! frame → route → forward → respond), and how it ended.
//!
//! Every HTTP request to the MCP endpoint gets one [`RequestContext`]; each phase
//! fills in what it learns (method, session, backend, exposed name) and the phase
//! that knows the end sets the typed [`Outcome`]. The context records itself
//! exactly once, when it is dropped: request metrics, rejection metrics and the
//! access (audit) log line are written there and nowhere else (pingora's `logging`
//! hook).
//!
//! The access line: one `INFO` event per host request, target `mcpgate::access`
//! (filter it with `RUST_LOG=info,mcpgate::access=off`), message `request`, fields
//! `method`, `rpc_id`, `session` (short id), `era` (`legacy`/`modern`), `revision`,
//! `issuer` and `subject` (the principal; never the token), `client` (the IP
//! address of the peer, or behind `server.trusted_proxies` the forwarded one), `backend`, `name` (the exposed tool/prompt name or URI),
//! `outcome` (the `mcpgate_requests_total` label), `code` (the JSON-RPC error code),
//! `status` (HTTP), `reason` (why refused), `ms` (duration), `bytes_in`,
//! `bytes_out` (the request body and the JSON-RPC answer, in bytes), `trace_id`
//! (the OpenTelemetry trace, only while `[telemetry]` is on), `handed`
//! (`true`: run here for a host of another replica, `http/owner.rs`; that
//! replica writes the host's line too). Absent fields are left out. Results are never logged; arguments only where the backend opts
//! in (`[backends.NAME.audit]`, field `arguments`).
//! The line is formatted by `logging::AccessFormat` (the same bytes as the stock
//! text or JSON formatter, cheaper); a field added here needs nothing there.
//! A context dropped without an outcome (the host went away, a task was
//! cancelled) is recorded as [`Outcome::Cancelled`].

use std::net::IpAddr;
use std::sync::Arc;

use tokio::time::Instant;

use crate::auth::{Principal, PrincipalId};
use crate::jsonrpc::Id;
use crate::mcp::{Method, ProtocolVersion, Request};
use crate::metrics::{BackendSeries, Metrics};
use crate::telemetry::ServerSpan;

mod access;
mod outcome;
mod span;
pub use outcome::{Outcome, Rejection};
pub use span::{record_target, request_span};

use access::Audit;
pub use access::audited_arguments;

/// One host request in flight through the gateway; see the module docs.
pub struct RequestContext {
    metrics: Arc<Metrics>,
    started: Instant,
    method: Option<Method>,
    session: Option<String>,
    backend: Option<Arc<str>>,
    /// The metric handles of `backend` (of `none` until routed).
    series: Option<Arc<BackendSeries>>,
    target: Option<String>,
    outcome: Option<Outcome>,
    /// A JSON-RPC request (counted in `mcpgate_requests_total`); notifications,
    /// responses and GET/DELETE get only the access log line unless refused.
    is_request: bool,
    /// The routed backend counts its `tools/call`s per tool.
    tool_metrics: bool,
    audit: Audit,
    /// The request's SERVER span, while tracing is on; it ends with the context.
    trace: Option<ServerSpan>,
    /// A `tools/call` answered with `isError: true` (a result, for the metrics).
    tool_error: bool,
    /// The `[endpoints.NAME]` the request came in at (`""`: `server.path`).
    endpoint: Arc<str>,
    /// Run here for another replica, which the host sent it to
    /// ([`RequestContext::set_handed`]): counted there, not here.
    handed: bool,
    /// Handed to another replica, which calls the backend
    /// ([`RequestContext::set_forwarded`]): its backend failures are counted there.
    forwarded: bool,
}

impl RequestContext {
    /// A context for a request that arrived now.
    pub fn new(metrics: &Arc<Metrics>) -> Self {
        RequestContext {
            metrics: metrics.clone(),
            started: Instant::now(),
            method: None,
            session: None,
            backend: None,
            series: None,
            target: None,
            outcome: None,
            is_request: false,
            tool_metrics: false,
            audit: Audit::default(),
            trace: None,
            tool_error: false,
            endpoint: Arc::from(""),
            handed: false,
            forwarded: false,
        }
    }

    /// The request came in at endpoint `name` (`[endpoints.NAME]`).
    pub fn set_endpoint(&mut self, name: Arc<str>) {
        self.endpoint = name;
    }

    /// The endpoint the request came in at (`""`: `server.path`).
    pub fn endpoint(&self) -> &Arc<str> {
        &self.endpoint
    }

    /// Whether the request has a SERVER span.
    pub fn is_traced(&self) -> bool {
        self.trace.is_some()
    }

    /// The result reports a tool error: the span's `error.type` is `tool_error`
    /// (OpenTelemetry MCP conventions); metrics still count a result.
    pub fn set_tool_error(&mut self) {
        self.tool_error = true;
    }

    /// The frame phase read JSON-RPC request `req` with these HTTP `headers`:
    /// while tracing is on, its SERVER span starts, continuing the host's trace.
    pub fn start_trace(&mut self, headers: &http::HeaderMap, req: &Request) {
        self.trace = ServerSpan::start(headers, &req.method, &req.id, req.params.as_ref());
        if let Some(t) = &self.trace {
            if let Some(ip) = self.audit.client {
                t.set_client(ip);
            }
            if let Some(s) = &self.session {
                t.set_session(s);
            }
        }
    }

    /// The trace context upstream calls continue (`None`: tracing is off).
    pub fn trace_context(&self) -> Option<opentelemetry::Context> {
        self.trace.as_ref().map(ServerSpan::context)
    }

    /// The accept phase: the client's address (the peer, or what trusted proxies
    /// forwarded).
    pub fn set_client(&mut self, client: Option<IpAddr>) {
        self.audit.client = client;
    }

    /// The accept phase authenticated `principal`.
    pub fn set_principal(&mut self, principal: Option<&Arc<Principal>>) {
        self.audit.principal = principal.map(|p| p.id());
    }

    /// The principal the request came from, as the access line names it.
    pub fn principal_id(&self) -> Option<&PrincipalId> {
        self.audit.principal.as_ref()
    }

    /// The client's address ([`RequestContext::set_client`]).
    pub fn client(&self) -> Option<IpAddr> {
        self.audit.client
    }

    /// A request another replica's host sent, handed to this replica as the
    /// owner of its session's per-session children (`http/owner.rs`): request
    /// `method` with JSON-RPC id `id` from `principal` at `client`, received at
    /// `endpoint`. Its access line says `handed=true`; it is counted in
    /// `mcpgate_requests_total` (and the per-tool metrics) where the host sent
    /// it, so not here; its backend failures, met here, are.
    pub fn set_handed(
        &mut self,
        (method, id): (&Method, &Id),
        principal: Option<PrincipalId>,
        client: Option<IpAddr>,
        endpoint: Arc<str>,
    ) {
        self.set_request(method);
        self.set_rpc_id(id);
        self.audit.principal = principal;
        self.audit.client = client;
        self.endpoint = endpoint;
        self.handed = true;
    }

    /// The request is handed to the replica owning its session's per-session
    /// children, which calls the backend: backend failures are counted there
    /// (`mcpgate_upstream_errors_total`), the request here.
    pub fn set_forwarded(&mut self) {
        self.forwarded = true;
    }

    /// The exposed name, URI or task id the request is about, where the
    /// backend is not known here (named by the replica that routes it).
    pub fn set_target(&mut self, target: &str) {
        self.target = Some(crate::error::clip(target).into_owned());
    }

    /// The frame phase read a body of `n` bytes.
    pub fn set_bytes_in(&mut self, n: usize) {
        self.audit.bytes_in = Some(n);
    }

    /// The JSON-RPC id of the request.
    pub fn set_rpc_id(&mut self, id: &Id) {
        self.audit.rpc_id = Some(id.clone());
    }

    /// The protocol revision the request is served under (its era follows).
    pub fn set_revision(&mut self, revision: ProtocolVersion) {
        self.audit.revision = Some(revision);
        self.audit.modern = Some(revision.is_modern());
        if let Some(t) = &self.trace {
            t.set_revision(revision.as_str());
        }
    }

    /// The frame phase found a 2026-07-28 message (its revision not checked yet).
    pub fn set_modern(&mut self) {
        self.audit.modern = Some(true);
    }

    /// A `GET` (stream) or `DELETE` (session end) request: the access line names
    /// the HTTP method, as there is no JSON-RPC one.
    pub fn set_http_method(&mut self, method: &'static str) {
        self.audit.http_method = Some(method);
    }

    /// The era classifier found a session-based (legacy) request: a POST
    /// without the 2026-07-28 claim, or a GET/DELETE without a 2026-07-28
    /// version header.
    pub fn set_legacy(&mut self) {
        self.audit.modern = Some(false);
    }

    /// The HTTP status of the answer, where it is not 200.
    pub fn set_status(&mut self, status: u16) {
        self.audit.status = Some(status);
    }

    /// The routed backend counts its `tools/call`s per tool (`tool_metrics`).
    pub fn set_tool_metrics(&mut self, on: bool) {
        self.tool_metrics = on;
    }

    /// What the access line shows of the call's arguments ([`audited_arguments`]).
    pub fn set_arguments(&mut self, shown: Option<String>) {
        self.audit.arguments = shown;
    }

    /// The JSON-RPC answer is `n` bytes.
    pub fn set_bytes_out(&mut self, n: usize) {
        self.audit.bytes_out = Some(n);
    }

    /// The frame phase read a JSON-RPC request of `method`.
    pub fn set_request(&mut self, method: &Method) {
        self.method = Some(method.clone());
        self.is_request = true;
    }

    /// The frame phase read a notification of `method` (or a response: `None`).
    pub fn set_notification(&mut self, method: Option<&Method>) {
        self.method = method.cloned();
        self.is_request = false;
    }

    /// The session phase found the session (`log_id`: its short, non-secret form).
    pub fn set_session(&mut self, log_id: &str) {
        self.session = Some(log_id.to_owned());
        if let Some(t) = &self.trace {
            t.set_session(log_id);
        }
    }

    /// The route phase chose `backend` for the exposed name or URI `target`.
    pub fn set_route(&mut self, backend: &Arc<str>, target: Option<&str>) {
        // A routed URI may be as long as the body: logged and traced bounded.
        let target = target.map(crate::error::clip);
        let target = target.as_deref();
        self.backend = Some(backend.clone());
        self.series = Some(self.metrics.series.get(Some(backend)));
        self.target = target.map(str::to_owned);
        span::record_route(backend, self.method.as_ref(), target);
        if let (Some(t), Some(m)) = (&self.trace, &self.method) {
            t.set_route(m, backend, target);
        }
    }

    /// The forward phase calls the backend of [`RequestContext::set_route`]: counts the call in
    /// flight until the guard drops, records the time (`mcpgate_upstream_{inflight,duration_seconds}`).
    pub fn upstream_call(&self) -> UpstreamCall {
        let (inflight, duration) = self.series().upstream(&self.metrics);
        inflight.inc();
        UpstreamCall {
            inflight,
            duration,
            started: Instant::now(),
        }
    }

    /// Ends the request with `outcome` (recorded now).
    pub fn finish(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }

    /// Ends the request with a JSON-RPC error of `code` (recorded now).
    pub fn finish_error(mut self, outcome: Outcome, code: i64) {
        self.audit.code = Some(code);
        self.finish(outcome);
    }

    /// Ends the request as refused with HTTP `status` and JSON-RPC `code`.
    pub fn reject_with(mut self, why: Rejection, status: u16, code: i64) {
        self.audit.status = Some(status);
        self.audit.code = Some(code);
        self.finish(Outcome::Rejected(why));
    }

    fn series(&self) -> &BackendSeries {
        self.series.as_deref().unwrap_or(self.metrics.series.none())
    }

    fn record(&self, outcome: Outcome) {
        let m = &self.metrics;
        let secs = self.started.elapsed().as_secs_f64();
        let method = self.method.as_ref().map_or("none", Method::label);
        let era = match self.audit.modern {
            Some(true) => "modern",
            Some(false) => "legacy",
            None => "unknown",
        };
        match outcome {
            Outcome::Rejected(why) => {
                m.rejections.with_label_values(&[why.label(), era]).inc();
                if why.is_auth() {
                    m.auth_failures.with_label_values(&[why.label()]).inc();
                }
            }
            _ if !self.is_request => {}
            // Counted where the host sent it; only its backend's failures here.
            _ if self.handed => {
                if let (Some(class), Some(b)) = (outcome.upstream_class(), &self.backend) {
                    m.upstream_errors.with_label_values(&[b, class]).inc();
                }
            }
            _ => {
                self.series().count(m, (method, outcome.label(), era), secs);
                if let (true, Some(Method::ToolsCall), Some(b), Some(tool)) =
                    (self.tool_metrics, &self.method, &self.backend, &self.target)
                {
                    m.tool_calls
                        .with_label_values(&[b, tool.as_str(), outcome.label()])
                        .inc();
                    m.tool_call_duration
                        .with_label_values(&[b, tool.as_str()])
                        .observe(secs);
                }
                if let (Some(class), Some(b), false) =
                    (outcome.upstream_class(), &self.backend, self.forwarded)
                {
                    m.upstream_errors.with_label_values(&[b, class]).inc();
                }
                if outcome == Outcome::Busy {
                    m.rejections.with_label_values(&["backend_busy", era]).inc();
                }
                let listed = self
                    .method
                    .as_ref()
                    .is_some_and(|m| m.list_kind().is_some());
                if listed && outcome == Outcome::Ok && self.backend.is_none() {
                    m.list_hit().inc();
                }
            }
        }
        self.log(outcome, secs);
        if let Some(t) = &self.trace {
            let error = match outcome {
                Outcome::Ok if self.tool_error => Some("tool_error".to_owned()),
                _ => error_type(outcome, self.audit.code),
            };
            t.finish(error.as_deref(), self.audit.code);
        }
    }
}

/// The span's `error.type` for `outcome` (OpenTelemetry MCP conventions: the
/// JSON-RPC error code as a string, else a low-cardinality class); `None` for
/// a result.
fn error_type(outcome: Outcome, code: Option<i64>) -> Option<String> {
    match outcome {
        Outcome::Ok | Outcome::InputRequired => None,
        Outcome::Error | Outcome::RpcError => {
            Some(code.map_or_else(|| "_OTHER".to_owned(), |c| c.to_string()))
        }
        Outcome::Timeout => Some("timeout".into()),
        Outcome::Unavailable(class) => Some(class.into()),
        Outcome::Busy => Some("backend_busy".into()),
        Outcome::Cancelled => Some("cancelled".into()),
        Outcome::Rejected(why) => Some(why.label().into()),
    }
}

/// One upstream call in flight; see [`RequestContext::upstream_call`].
pub struct UpstreamCall {
    inflight: prometheus::IntGauge,
    duration: prometheus::Histogram,
    started: Instant,
}

impl Drop for UpstreamCall {
    fn drop(&mut self) {
        self.inflight.dec();
        self.duration.observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for RequestContext {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or(Outcome::Cancelled);
        self.record(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(method: &str, backend: Option<&str>, outcome: Outcome) -> String {
        let m = Arc::new(Metrics::new());
        let mut ctx = RequestContext::new(&m);
        ctx.set_request(&Method::parse(method));
        ctx.set_legacy();
        if let Some(b) = backend {
            ctx.set_route(&b.into(), None);
        }
        ctx.finish(outcome);
        m.render()
    }

    #[test]
    fn records_requests_once_with_bounded_labels() {
        let text = record("tools/call", Some("time"), Outcome::Ok);
        assert!(
            text.contains(
                r#"mcpgate_requests_total{backend="time",era="legacy",method="tools/call",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("mcpgate_request_duration_seconds_bucket"));
        let text = record("made/up", None, Outcome::Error);
        assert!(text.contains(r#"method="other""#), "{text}");
        let text = record("evil/\"label", None, Outcome::Error);
        assert!(!text.contains("evil"), "{text}");
    }

    #[test]
    fn classifies_failures_and_counts_refusals() {
        let text = record("tools/call", Some("b"), Outcome::Timeout);
        assert!(
            text.contains(r#"mcpgate_upstream_errors_total{backend="b",class="timeout"} 1"#),
            "{text}"
        );
        let text = record("tools/call", Some("b"), Outcome::Busy);
        assert!(
            text.contains(r#"mcpgate_rejections_total{era="legacy",reason="backend_busy"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"outcome="unavailable""#), "{text}");
        let m = Arc::new(Metrics::new());
        RequestContext::new(&m).reject_with(Rejection::Unauthorized, 401, -32000);
        let text = m.render();
        assert!(
            text.contains(r#"mcpgate_rejections_total{era="unknown",reason="unauthorized"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mcpgate_auth_failures_total{reason="unauthorized"} 1"#),
            "{text}"
        );
        assert!(
            !text.contains("mcpgate_requests_total{"),
            "a refusal is not a request: {text}"
        );
    }

    #[test]
    fn a_dropped_context_counts_as_cancelled() {
        let m = Arc::new(Metrics::new());
        let mut ctx = RequestContext::new(&m);
        ctx.set_request(&Method::ToolsCall);
        drop(ctx);
        assert!(m.render().contains(r#"outcome="cancelled"} 1"#));
    }
}
