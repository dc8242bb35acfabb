//! Prometheus metrics: one explicit registry, bounded labels only.
//!
//! Label values come from closed sets: configured backend names (plus `none` for
//! answers the gateway gives itself), the MCP method names of `mcp::Method`
//! (anything else is `other`), and the `request::Outcome` / `Rejection` enums.
//! Tool names, session ids and principals are never labels. Per-request metrics
//! are recorded in one place, when a `request::RequestContext` ends.

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

mod series;

pub use series::BackendSeries;

/// All gateway metrics (names `mcpgate_<noun>_<unit>`).
pub struct Metrics {
    registry: Registry,
    /// Host requests by method, backend and outcome.
    pub requests: IntCounterVec,
    /// Host request duration by method (gateway edge to answer).
    pub request_duration: HistogramVec,
    /// Routed `tools/call`s by backend, exposed tool name and outcome, for
    /// backends with `tool_metrics = true` (the tool label is bounded by the
    /// catalogue: only routed names are counted).
    pub tool_calls: IntCounterVec,
    /// Routed `tools/call` duration by backend and exposed tool name.
    pub tool_call_duration: HistogramVec,
    /// Time spent waiting for backends, by backend.
    pub upstream_duration: HistogramVec,
    /// Active host sessions.
    pub sessions_active: IntGauge,
    /// Open SSE response streams toward hosts.
    pub sse_streams_open: IntGauge,
    /// Requests in flight toward each backend.
    pub upstream_inflight: IntGaugeVec,
    /// 1 while a backend's shared (or catalogue) connection is up.
    pub backend_up: IntGaugeVec,
    /// Restarts of stdio backends (and reconnects of others).
    pub backend_restarts: IntCounterVec,
    /// Backend failures by class: timeout, closed, protocol, http_4xx, http_5xx.
    pub upstream_errors: IntCounterVec,
    /// Backends whose catalogue could not be fetched while others could.
    pub fanout_partial_failures: IntCounter,
    /// List requests served from the aggregated catalogue (`hit`) and catalogue
    /// re-fetches from backends (`miss`).
    pub list_cache: IntCounterVec,
    /// Authentication/authorization failures by reason.
    pub auth_failures: IntCounterVec,
    /// Requests refused before routing, by reason (origin, accept, content_type,
    /// body_too_large, body_timeout, session_missing, session_unknown, version, rate_limited,
    /// too_many_sessions, too_many_streams, backend_busy).
    pub rejections: IntCounterVec,
    /// Connections to per-session backends not opened for a call, by backend
    /// and the limit that refused it (`max_connections`, `per_client`:
    /// `max_connections_per_client`, `pool_wait`: no pooled connection was
    /// ready or free within `queue_timeout`). Each such call is also a
    /// `backend_busy` rejection.
    pub backend_connection_refusals: IntCounterVec,
    /// Idle per-session connections closed to make room for another one, by
    /// backend and the limit reached (`max_connections`, `per_client`).
    pub backend_connections_reclaimed: IntCounterVec,
    /// Messages toward hosts that were dropped, by reason.
    pub dropped_messages: IntCounterVec,
    /// Request body bytes received from hosts.
    pub bytes_in: IntCounter,
    /// Response bytes sent to hosts.
    pub bytes_out: IntCounter,
    /// Always 1, labelled with the version and source revision of this build.
    pub build_info: IntGaugeVec,
    /// Configuration reloads by result (`success`, `failure`).
    pub config_reloads: IntCounterVec,
    /// 1 if the last configuration load (start or reload) succeeded, else 0.
    pub config_last_reload_successful: IntGauge,
    /// Unix time (seconds) of the last successful configuration load.
    pub config_last_reload_success_timestamp: Gauge,
    /// 1 while the configuration file holds changes that only a restart applies
    /// (`server.listen`, `server.metrics_listen`, `[cluster]`, `[telemetry]`):
    /// the last reload kept the running values. 0 otherwise.
    pub config_restart_required: IntGauge,
    /// `server.max_sessions`: the session cap (`mcpgate_sessions_active` reaches it).
    pub sessions_max: IntGauge,
    /// Sessions never used after `initialize` that were ended to make room for
    /// a new one, by the limit reached (`max_sessions`, `per_client`).
    pub sessions_evicted: IntCounterVec,
    /// Session ids this process had to open because it did not hold the session
    /// (after a restart, or from another replica), by result: `restored`,
    /// `forged` (does not open), `ended` (ended here, or past its lifetime),
    /// `principal` (another principal's). A cached session never counts here.
    pub session_restores: IntCounterVec,
    /// Server→client requests and log messages of a shared backend connection that
    /// could not be tied to exactly one host call (refused or dropped), by backend.
    pub unroutable_backend_messages: IntCounterVec,
    /// 1 while the shared session store (`[cluster] redis`) answers, else 0;
    /// absent without one.
    pub cluster_redis_up: IntGauge,
    /// Shared store operations that failed or missed their deadline, by
    /// operation (`heartbeat`, `put`, `get`, `refresh`, `delete`, `set`,
    /// `publish`, `exists`, `subscribe`, `send`, `mirror`, `events`, `alive`,
    /// `claim`, `release`, `take`).
    pub cluster_store_errors: IntCounterVec,
    /// Sessions served from their sealed id alone because the shared store was
    /// unavailable (fail open: an ended session may be used by its own
    /// principal until the store is back).
    pub cluster_degraded: IntCounter,
    /// Work handed to another replica through the shared store, by kind:
    /// `answer` (a host's answer to a request another replica relayed),
    /// `cancel` (a host's cancel of a request this replica does not run).
    pub cluster_forwarded: IntCounterVec,
    /// Sessions whose per-session children this replica took over from a
    /// replica that died, by `reason` (`owner_lost`: its heartbeat was gone
    /// when a request needed a child; `unreachable`: it stopped heartbeating
    /// while a request handed to it waited to be picked up).
    pub cluster_adoptions: IntCounterVec,
    /// GET streams on per-session HTTP backends' shared backend sessions
    /// this replica took over, by `reason` (`holder_lost`: the listening
    /// replica's heartbeat was gone; `released`: it let go).
    pub cluster_listener_takeovers: IntCounterVec,
    /// Sessions whose per-session stdio children this replica owns.
    pub sessions_owned: IntGauge,
    /// 2026-07-28 retries carrying a `requestState` the gateway issued, by
    /// `kind` (`continuation`: a call parked by the bridge; `wrapped`: a
    /// 2026-07-28 backend's state wrapped in ours) and `result` (`resumed`,
    /// `invalid`: -32602, `elsewhere`: the continuation is on another replica,
    /// `gone`: no longer parked).
    pub input_required_retries: IntCounterVec,
    /// The handles of the per-call series by backend (`series.rs`): a request
    /// finds them once instead of a label lookup per metric.
    pub series: series::SeriesTable,
    /// `mcpgate_list_cache_lookups_total{result="hit"}`, made on first use.
    list_hit: std::sync::OnceLock<IntCounter>,
}

/// The source revision baked in at build time (`MCPGATE_REVISION=$(git rev-parse
/// --short HEAD) cargo build`), else `unknown`.
const REVISION: &str = match option_env!("MCPGATE_REVISION") {
    Some(r) => r,
    None => "unknown",
};

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

fn histogram_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let buckets = vec![
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ];
    let m = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let m = IntCounter::new(name, help).unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

fn float_gauge(r: &Registry, name: &str, help: &str) -> Gauge {
    let m = Gauge::new(name, help).unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let m = IntGauge::new(name, help).unwrap_or_else(|_| unreachable_metric(name));
    let _ = r.register(Box::new(m.clone()));
    m
}

/// Metric definitions are constants; an invalid one is a programming error that
/// the unit test below catches.
fn unreachable_metric(name: &str) -> ! {
    panic!("invalid metric definition {name}")
}

impl Metrics {
    /// Creates and registers every metric in a fresh registry.
    pub fn new() -> Self {
        let r = Registry::new();
        let backend = &["backend"];
        let m = Metrics {
            requests: counter_vec(
                &r,
                "mcpgate_requests_total",
                "Host requests by method, backend, outcome and protocol era (legacy: session-based revisions; modern: 2026-07-28).",
                &["method", "backend", "outcome", "era"],
            ),
            request_duration: histogram_vec(
                &r,
                "mcpgate_request_duration_seconds",
                "Host request duration (seconds) by method.",
                &["method"],
            ),
            tool_calls: counter_vec(
                &r,
                "mcpgate_tool_calls_total",
                "Routed tools/call requests by backend, exposed tool name and outcome.",
                &["backend", "tool", "outcome"],
            ),
            tool_call_duration: histogram_vec(
                &r,
                "mcpgate_tool_call_duration_seconds",
                "Routed tools/call duration (seconds) by backend and exposed tool name.",
                &["backend", "tool"],
            ),
            upstream_duration: histogram_vec(
                &r,
                "mcpgate_upstream_duration_seconds",
                "Time waiting for backends (seconds) by backend.",
                backend,
            ),
            sessions_active: gauge(&r, "mcpgate_sessions_active", "Active host sessions."),
            sse_streams_open: gauge(
                &r,
                "mcpgate_sse_streams_open",
                "Open SSE streams toward hosts.",
            ),
            upstream_inflight: gauge_vec(
                &r,
                "mcpgate_upstream_inflight",
                "Requests in flight toward each backend.",
                backend,
            ),
            backend_up: gauge_vec(
                &r,
                "mcpgate_backend_up",
                "1 while the backend's shared or catalogue connection is up.",
                backend,
            ),
            backend_restarts: counter_vec(
                &r,
                "mcpgate_backend_restarts_total",
                "Backend (re)connections after a failure (stdio restarts).",
                backend,
            ),
            upstream_errors: counter_vec(
                &r,
                "mcpgate_upstream_errors_total",
                "Backend failures by class.",
                &["backend", "class"],
            ),
            fanout_partial_failures: counter(
                &r,
                "mcpgate_fanout_partial_failures_total",
                "Catalogue fetches that failed while other backends answered.",
            ),
            list_cache: counter_vec(
                &r,
                "mcpgate_list_cache_lookups_total",
                "List requests served from the catalogue (hit) and catalogue fetches (miss).",
                &["result"],
            ),
            auth_failures: counter_vec(
                &r,
                "mcpgate_auth_failures_total",
                "Authentication and authorization failures by reason.",
                &["reason"],
            ),
            rejections: counter_vec(
                &r,
                "mcpgate_rejections_total",
                "Host requests refused before routing, by reason and protocol era (unknown: refused before the body was read).",
                &["reason", "era"],
            ),
            backend_connection_refusals: counter_vec(
                &r,
                "mcpgate_backend_connection_refusals_total",
                "Connections to per-session backends refused for a call, by backend and limit (max_connections, per_client, pool_wait).",
                &["backend", "reason"],
            ),
            backend_connections_reclaimed: counter_vec(
                &r,
                "mcpgate_backend_connections_reclaimed_total",
                "Idle per-session connections closed to make room for another (reclaim_idle_after), by backend and limit (max_connections, per_client).",
                &["backend", "reason"],
            ),
            dropped_messages: counter_vec(
                &r,
                "mcpgate_dropped_messages_total",
                "Messages toward hosts that were dropped, by reason.",
                &["reason"],
            ),
            bytes_in: counter(
                &r,
                "mcpgate_received_bytes_total",
                "Request body bytes received from hosts.",
            ),
            bytes_out: counter(
                &r,
                "mcpgate_sent_bytes_total",
                "Response bytes sent to hosts.",
            ),
            build_info: gauge_vec(
                &r,
                "mcpgate_build_info",
                "Always 1: the version and source revision of the running build.",
                &["version", "revision"],
            ),
            config_reloads: counter_vec(
                &r,
                "mcpgate_config_reloads_total",
                "Configuration reloads (SIGHUP or file change) by result.",
                &["result"],
            ),
            config_last_reload_successful: gauge(
                &r,
                "mcpgate_config_last_reload_successful",
                "1 if the last configuration load or reload succeeded, 0 if it was refused.",
            ),
            config_last_reload_success_timestamp: float_gauge(
                &r,
                "mcpgate_config_last_reload_success_timestamp_seconds",
                "Unix time of the last successful configuration load or reload.",
            ),
            config_restart_required: gauge(
                &r,
                "mcpgate_config_restart_required",
                "1 while the configuration file changes settings that need a restart (the running values stay), else 0.",
            ),
            session_restores: counter_vec(
                &r,
                "mcpgate_session_restores_total",
                "Session ids opened because this process did not hold the session, by result.",
                &["result"],
            ),
            sessions_max: gauge(
                &r,
                "mcpgate_sessions_max",
                "The session cap (server.max_sessions).",
            ),
            sessions_evicted: counter_vec(
                &r,
                "mcpgate_sessions_evicted_total",
                "Never-used sessions ended to make room for a new one, by the limit reached (max_sessions, per_client).",
                &["reason"],
            ),
            unroutable_backend_messages: counter_vec(
                &r,
                "mcpgate_unroutable_backend_requests_total",
                "Server-to-client requests and logs of a shared backend connection that no single host call could be tied to (refused or dropped), by backend.",
                backend,
            ),
            cluster_redis_up: IntGauge::new(
                "mcpgate_cluster_redis_up",
                "1 while the shared session store ([cluster] redis) answers, else 0.",
            )
            .unwrap_or_else(|_| unreachable_metric("mcpgate_cluster_redis_up")),
            cluster_store_errors: counter_vec(
                &r,
                "mcpgate_cluster_store_errors_total",
                "Shared session store operations that failed or missed their deadline, by operation.",
                &["op"],
            ),
            cluster_degraded: counter(
                &r,
                "mcpgate_cluster_degraded_total",
                "Sessions served from their sealed id alone because the shared store was unavailable.",
            ),
            cluster_forwarded: counter_vec(
                &r,
                "mcpgate_cluster_forwarded_total",
                "Work handed to another replica through the shared store, by kind (answer, cancel, standalone: messages for a standalone stream another replica produces, call: a request for a per-session child another replica owns).",
                &["kind"],
            ),
            cluster_adoptions: counter_vec(
                &r,
                "mcpgate_cluster_adoptions_total",
                "Sessions whose per-session children this replica took over from a dead replica, by reason (owner_lost, unreachable).",
                &["reason"],
            ),
            cluster_listener_takeovers: counter_vec(
                &r,
                "mcpgate_cluster_listener_takeovers_total",
                "GET streams on per-session HTTP backends' shared backend sessions this replica took over, by reason (holder_lost, released).",
                &["reason"],
            ),
            sessions_owned: gauge(
                &r,
                "mcpgate_sessions_owned",
                "Sessions whose per-session stdio children this replica owns (with a shared store).",
            ),
            input_required_retries: counter_vec(
                &r,
                "mcpgate_input_required_retries_total",
                "2026-07-28 retries carrying a requestState the gateway issued, by kind (continuation, wrapped) and result (resumed, invalid, elsewhere, gone).",
                &["kind", "result"],
            ),
            series: series::SeriesTable::new(),
            list_hit: std::sync::OnceLock::new(),
            registry: r,
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), REVISION])
            .set(1);
        for result in ["success", "failure"] {
            m.config_reloads.with_label_values(&[result]);
        }
        for reason in ["max_sessions", "per_client"] {
            m.sessions_evicted.with_label_values(&[reason]);
        }
        for result in ["resumed", "invalid", "elsewhere", "gone"] {
            m.input_required_retries
                .with_label_values(&["continuation", result]);
        }
        for result in ["resumed", "invalid"] {
            m.input_required_retries
                .with_label_values(&["wrapped", result]);
        }
        m
    }

    /// `mcpgate_list_cache_lookups_total{result="hit"}` (a list answered from
    /// the catalogue).
    pub fn list_hit(&self) -> &IntCounter {
        self.list_hit
            .get_or_init(|| self.list_cache.with_label_values(&["hit"]))
    }

    /// Shows `mcpgate_cluster_redis_up` (only a gateway with a shared store has it).
    pub fn register_cluster(&self) {
        let _ = self
            .registry
            .register(Box::new(self.cluster_redis_up.clone()));
    }

    /// Records the configuration the gateway started with: loaded now, and its
    /// session cap (`server.max_sessions`).
    pub fn config_loaded(&self, max_sessions: usize) {
        self.sessions_max
            .set(i64::try_from(max_sessions).unwrap_or(i64::MAX));
        self.config_last_reload_successful.set(1);
        self.config_last_reload_success_timestamp.set(unix_now());
    }

    /// Records a reload whose new configuration was applied.
    pub fn reload_succeeded(&self) {
        self.config_reloads.with_label_values(&["success"]).inc();
        self.config_last_reload_successful.set(1);
        self.config_last_reload_success_timestamp.set(unix_now());
    }

    /// Records a reload that was refused (the running configuration stays).
    pub fn reload_failed(&self) {
        self.config_reloads.with_label_values(&["failure"]).inc();
        self.config_last_reload_successful.set(0);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_and_reload_results() {
        let m = Metrics::new();
        let text = m.render();
        let info = format!(
            r#"mcpgate_build_info{{revision="{REVISION}",version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&info), "{text}");
        assert!(text.contains(r#"mcpgate_config_reloads_total{result="failure"} 0"#));
        m.config_loaded(7);
        m.reload_failed();
        let text = m.render();
        assert!(text.contains("mcpgate_sessions_max 7"), "{text}");
        assert!(text.contains(r#"mcpgate_config_reloads_total{result="failure"} 1"#));
        assert!(text.contains("mcpgate_config_last_reload_successful 0"));
        m.reload_succeeded();
        assert!(
            m.render()
                .contains("mcpgate_config_last_reload_successful 1")
        );
        assert!(m.config_last_reload_success_timestamp.get() > 1.7e9);
    }
}
