//! Hot reload of a whole configuration ([`Gateway::reload`]): what applies at
//! once, what needs a restart, and the order that keeps every request on one
//! consistent configuration.
//!
//! Everything in a file applies except the settings bound at start, which keep
//! their running values, each named in a warning (as `[cluster]` and
//! `[telemetry]` always were): `server.listen` and `server.metrics_listen` (the
//! bound sockets), `[cluster]` (the keys every session id is sealed with, the
//! shared store connection) and `[telemetry]` (the process-wide trace
//! pipeline). A file that cannot apply as a whole (it does not load or
//! validate, or it turns `[auth]` on or off) changes nothing and counts as a
//! failed reload.
//!
//! Order: nothing can fail after the checks. Then the `[server]` settings that
//! outlive a request (supervisor, session store, catalogue), the backends,
//! `[policy]` with the endpoints' filters (an endpoint being removed sees
//! nothing from here on), `[auth]`, and the server face as one new generation
//! (routes, limits, rules, authenticator: `http::AppState`), swapped in whole,
//! so every request after it sees the new paths and limits and a request in
//! progress finishes with the old ones. Last, sessions of endpoints that were
//! removed or moved end.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::auth::Authenticator;
use crate::config::{Config, ServerConfig};
use crate::http::{self, AppState, OriginPolicy};
use crate::supervisor::{self, ReloadReport};
use crate::{Gateway, metrics_app};

impl Gateway {
    /// Applies a new, already validated configuration (hot reload) and returns
    /// what changed. Backends added, removed and changed take effect without
    /// touching the sessions of the others; `[auth]` (issuers, audiences, JWKS
    /// settings, required scopes, the resource and its metadata paths) and
    /// `[policy]` are replaced whole; `[server]` settings apply to the requests,
    /// connections and sessions that start from now on (sessions stay, a
    /// lowered cap ends none); `[endpoints]` added start serving, removed ones
    /// answer 404 and moved ones serve at their new path only, and the
    /// sessions of removed and moved endpoints end. A host whose view changed is
    /// told its lists changed.
    ///
    /// Kept at their running values, each logged at `WARN` and listed in
    /// `report.restart`: `server.listen`, `server.metrics_listen`, `[cluster]`,
    /// `[telemetry]` (the rest applies).
    ///
    /// Refused, changing nothing (`report.refused`, logged, counted as a failed
    /// reload): turning `[auth]` on or off.
    pub async fn reload(&self, config: &Config) -> ReloadReport {
        let _one = self.reloading.lock().await;
        let running = lock(&self.running).clone();
        let mut config = config.clone();
        let restart = keep_running(&running, &mut config);
        let authorization_changed = format!("{:?}", running.auth) != format!("{:?}", config.auth)
            || format!("{:?}", running.policy) != format!("{:?}", config.policy)
            || running.endpoints != config.endpoints
            || running.server.path != config.server.path;
        let new_auth = match self.prepare_auth(&config, authorization_changed) {
            Ok(a) => a,
            Err(why) => {
                tracing::error!(cause = %why, "configuration reload refused; nothing changed (restart to apply it)");
                self.metrics.reload_failed();
                return ReloadReport::refused(why);
            }
        };
        let server = server_changes(&running.server, &config.server);
        supervisor::reload_server(&self.supervisor, &config.server);
        let mut report = supervisor::reload(&self.supervisor, &config).await;
        report.restart = restart;
        report.server = server;
        let policy_changed = format!("{:?} {:?}", running.policy, running.endpoints)
            != format!("{:?} {:?}", config.policy, config.endpoints);
        if policy_changed {
            supervisor::reload_policy(&self.supervisor, &config.policy, &config.endpoints);
            report.policy = true;
        }
        if let (Some(handle), Some(new)) = (&self.auth, new_auth) {
            handle.replace(new);
            report.auth = format!("{:?}", running.auth) != format!("{:?}", config.auth);
        }
        let gone = self.replace_face(&config, &mut report);
        self.reaper.notify_one();
        if !gone.is_empty() {
            report.sessions_ended = supervisor::end_sessions_at(&self.supervisor, &gone).await;
        }
        self.metrics
            .config_restart_required
            .set(i64::from(!report.restart.is_empty()));
        *lock(&self.running) = config;
        tracing::info!(
            server = ?report.server,
            auth = report.auth,
            policy = report.policy,
            endpoints_added = ?report.endpoints_added,
            endpoints_removed = ?report.endpoints_removed,
            endpoints_moved = ?report.endpoints_moved,
            sessions_ended = report.sessions_ended,
            "configuration applied"
        );
        self.metrics.reload_succeeded();
        report
    }

    /// Records a new configuration that was refused (it did not load or
    /// validate): the running one stays (`mcpgate_config_reloads_total`).
    pub fn reload_refused(&self) {
        self.metrics.reload_failed();
    }

    /// The authenticator a reload would put in force (`None`: nothing to
    /// replace), checked against the one running.
    ///
    /// Errors: `[auth]` turned on or off (the listener was checked against it at
    /// start: a non-loopback address needs it).
    fn prepare_auth(
        &self,
        config: &Config,
        changed: bool,
    ) -> Result<Option<Arc<Authenticator>>, String> {
        let new = config.auth.as_ref().and_then(|a| {
            Authenticator::new(a, &config.policy, &config.server.path, &config.endpoints)
        });
        match (&self.auth, new) {
            (None, None) => Ok(None),
            (Some(_), None) => Err("[auth] would be turned off".into()),
            (None, Some(_)) => Err("[auth] would be turned on".into()),
            (Some(_), Some(_)) if !changed => Ok(None),
            (Some(_), Some(new)) => Ok(Some(new)),
        }
    }

    /// Builds the next generation of the server face from `config` and swaps
    /// it in (and the metrics listener's, for `admin_endpoints`); records which
    /// endpoints were added, removed and moved. Returns the names of the
    /// endpoints whose sessions must end (removed or moved).
    fn replace_face(&self, config: &Config, report: &mut ReloadReport) -> BTreeSet<String> {
        let server = Arc::new(config.server.clone());
        let mut state = lock(&self.state);
        let auth = self.auth.as_ref().map(|h| h.current());
        let routes = http::Routes::new(&server.path, &config.endpoints, auth.as_deref());
        let mut gone = BTreeSet::new();
        let (before, after) = (state.routes.endpoints(), routes.endpoints());
        for (name, path) in &before {
            match after.get(name) {
                None => report.endpoints_removed.push((*name).to_owned()),
                Some(p) if p != path => report.endpoints_moved.push((*name).to_owned()),
                Some(_) => continue,
            }
            gone.insert((*name).to_owned());
        }
        report.endpoints_added = after
            .keys()
            .filter(|n| !before.contains_key(*n))
            .map(|n| (*n).to_owned())
            .collect();
        let limiter = if server.rate_limit == state.server.rate_limit {
            state.limiter.clone()
        } else {
            server
                .rate_limit
                .and_then(http::limit::Limiter::new)
                .map(Arc::new)
        };
        state
            .dispatch
            .set_input_required_timeout(server.input_required_timeout);
        let next = AppState {
            routes: Arc::new(routes),
            limiter: limiter.clone(),
            proxies: Arc::new(http::client::TrustedProxies::new(&server.trusted_proxies)),
            origins: Arc::new(OriginPolicy::new(
                self.local_addr,
                &server.allowed_origins,
                &server.allowed_hosts,
            )),
            auth,
            server: server.clone(),
            ..state.clone()
        };
        self.limiter.store(limiter);
        self.face.replace(http::app(next.clone()));
        *state = next;
        if let Some(face) = &self.metrics_face {
            face.replace(metrics_app(
                &server,
                &self.metrics,
                &self.sessions,
                &self.supervisor,
                &self.catalog,
            ));
        }
        gone
    }
}

/// Sets in `config` the running values of what needs a restart, and names
/// each one that differed (logged at `WARN`: the file and the process disagree
/// until the next restart).
fn keep_running(running: &Config, config: &mut Config) -> Vec<&'static str> {
    let mut restart = Vec::new();
    let mut keep = |setting: &'static str, differs: bool, why: &str| {
        if differs {
            tracing::warn!(
                setting,
                why,
                "configuration reload: {setting} changed but needs a restart; the running value stays (the rest of the file applies)"
            );
            restart.push(setting);
        }
    };
    keep(
        "server.listen",
        running.server.listen != config.server.listen,
        "the listening socket is bound at start",
    );
    keep(
        "server.metrics_listen",
        running.server.metrics_listen != config.server.metrics_listen,
        "the metrics socket is bound at start",
    );
    keep(
        "cluster",
        running.cluster != config.cluster,
        "session ids and cursors are sealed with its keys; the shared store is connected at start",
    );
    keep(
        "telemetry",
        running.telemetry != config.telemetry,
        "the trace pipeline is installed at start",
    );
    config.server.listen = running.server.listen;
    config.server.metrics_listen = running.server.metrics_listen;
    config.cluster = running.cluster.clone();
    config.telemetry = running.telemetry.clone();
    restart
}

/// The `[server]` settings that differ between `old` and `new` (after
/// [`keep_running`]: all of them apply at a reload). Every field is named
/// here, so a new one does not compile until it is classified.
fn server_changes(old: &ServerConfig, new: &ServerConfig) -> Vec<&'static str> {
    let ServerConfig {
        listen: _,
        metrics_listen: _,
        path,
        allowed_origins,
        allowed_hosts,
        trusted_proxies,
        session_idle_timeout,
        max_sessions,
        max_sessions_per_client,
        max_body_bytes,
        header_read_timeout,
        body_read_timeout,
        page_size,
        max_name_len,
        json_response_window,
        sse_keep_alive,
        request_timeout,
        admin_endpoints,
        rate_limit,
        max_streams_per_session,
        backend_ping_interval,
        shutdown_grace,
        drain_delay,
        modern,
        input_required_timeout,
    } = new;
    [
        ("path", *path != old.path),
        ("allowed_origins", *allowed_origins != old.allowed_origins),
        ("allowed_hosts", *allowed_hosts != old.allowed_hosts),
        ("trusted_proxies", *trusted_proxies != old.trusted_proxies),
        (
            "session_idle_timeout",
            *session_idle_timeout != old.session_idle_timeout,
        ),
        ("max_sessions", *max_sessions != old.max_sessions),
        (
            "max_sessions_per_client",
            *max_sessions_per_client != old.max_sessions_per_client,
        ),
        ("max_body_bytes", *max_body_bytes != old.max_body_bytes),
        (
            "header_read_timeout",
            *header_read_timeout != old.header_read_timeout,
        ),
        (
            "body_read_timeout",
            *body_read_timeout != old.body_read_timeout,
        ),
        ("page_size", *page_size != old.page_size),
        ("max_name_len", *max_name_len != old.max_name_len),
        (
            "json_response_window",
            *json_response_window != old.json_response_window,
        ),
        ("sse_keep_alive", *sse_keep_alive != old.sse_keep_alive),
        ("request_timeout", *request_timeout != old.request_timeout),
        ("admin_endpoints", *admin_endpoints != old.admin_endpoints),
        ("rate_limit", *rate_limit != old.rate_limit),
        (
            "max_streams_per_session",
            *max_streams_per_session != old.max_streams_per_session,
        ),
        (
            "backend_ping_interval",
            *backend_ping_interval != old.backend_ping_interval,
        ),
        ("shutdown_grace", *shutdown_grace != old.shutdown_grace),
        ("drain_delay", *drain_delay != old.drain_delay),
        ("modern", *modern != old.modern),
        (
            "input_required_timeout",
            *input_required_timeout != old.input_required_timeout,
        ),
    ]
    .into_iter()
    .filter_map(|(name, changed)| changed.then_some(name))
    .collect()
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
