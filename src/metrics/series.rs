//! Handles of the per-call series, kept so that a call does not look them up by
//! label each time.
//!
//! `MetricVec::with_label_values` hashes every label value and takes the vec's
//! lock for each of the four lookups of a forwarded call (~150 instructions
//! each, `bench/README.md`). A [`BackendSeries`] is found once per request by
//! backend name (at routing), and holds the backend's upstream handles and a
//! small table of the (method, outcome, era) handles of finished requests. Every
//! handle is made on first use through the vec, so `/metrics` shows the same
//! series as before, at the same moment; the label sets are the bounded ones of
//! `metrics` (configured backend names, `mcp::Method` labels, the outcome enums),
//! so the tables stay as small as the vecs themselves.

use std::sync::{Arc, OnceLock, RwLock};

use foldhash::{HashMap, HashMapExt};
use prometheus::{Histogram, IntCounter, IntGauge};

use crate::metrics::Metrics;

/// The handles of one finished host request's series.
struct CallSeries {
    /// `mcpgate_requests_total{method, backend, outcome, era}`.
    requests: IntCounter,
    /// `mcpgate_request_duration_seconds{method}`.
    duration: Histogram,
}

/// (method, outcome, era) labels of a finished request.
type CallKey = (&'static str, &'static str, &'static str);

/// The per-call series of one backend (`none`: answers the gateway gives
/// itself), made on first use.
pub struct BackendSeries {
    name: Arc<str>,
    inflight: OnceLock<IntGauge>,
    upstream: OnceLock<Histogram>,
    calls: RwLock<HashMap<CallKey, CallSeries>>,
}

impl BackendSeries {
    fn new(name: Arc<str>) -> Self {
        BackendSeries {
            name,
            inflight: OnceLock::new(),
            upstream: OnceLock::new(),
            calls: RwLock::new(HashMap::new()),
        }
    }

    /// `mcpgate_upstream_inflight{backend}` and
    /// `mcpgate_upstream_duration_seconds{backend}` of `m`.
    pub fn upstream(&self, m: &Metrics) -> (IntGauge, Histogram) {
        let label = [&*self.name];
        let inflight = self
            .inflight
            .get_or_init(|| m.upstream_inflight.with_label_values(&label));
        let duration = self
            .upstream
            .get_or_init(|| m.upstream_duration.with_label_values(&label));
        (inflight.clone(), duration.clone())
    }

    /// Counts a request of `method` that ended with `outcome` in `era` (label
    /// values) and took `secs` in `m`'s `mcpgate_requests_total` and
    /// `mcpgate_request_duration_seconds`.
    pub fn count(&self, m: &Metrics, key: CallKey, secs: f64) {
        let count = |s: &CallSeries| {
            s.requests.inc();
            s.duration.observe(secs);
        };
        if let Some(s) = self
            .calls
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return count(s);
        }
        let (method, outcome, era) = key;
        let made = CallSeries {
            requests: m
                .requests
                .with_label_values(&[method, &self.name, outcome, era]),
            duration: m.request_duration.with_label_values(&[method]),
        };
        count(
            self.calls
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key)
                .or_insert(made),
        );
    }
}

/// Every backend's [`BackendSeries`], by name.
pub struct SeriesTable {
    none: Arc<BackendSeries>,
    by_name: RwLock<HashMap<Arc<str>, Arc<BackendSeries>>>,
}

impl SeriesTable {
    pub(super) fn new() -> Self {
        SeriesTable {
            none: Arc::new(BackendSeries::new(Arc::from("none"))),
            by_name: RwLock::new(HashMap::new()),
        }
    }

    /// The series of the gateway's own answers (label `none`).
    pub fn none(&self) -> &BackendSeries {
        &self.none
    }

    /// The series of `backend` (`None`: the gateway's own answers, label `none`).
    pub fn get(&self, backend: Option<&Arc<str>>) -> Arc<BackendSeries> {
        let Some(name) = backend else {
            return self.none.clone();
        };
        if let Some(s) = self
            .by_name
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&**name)
        {
            return s.clone();
        }
        self.by_name
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_insert_with(|| Arc::new(BackendSeries::new(name.clone())))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_handles_count_in_the_labelled_series() {
        let m = Metrics::new();
        let h = m.series.get(Some(&"h".into()));
        assert!(std::sync::Arc::ptr_eq(&h, &m.series.get(Some(&"h".into()))));
        let key = ("tools/call", "ok", "legacy");
        for _ in 0..2 {
            h.count(&m, key, 0.001);
        }
        let (inflight, duration) = h.upstream(&m);
        inflight.inc();
        duration.observe(0.002);
        m.series
            .none()
            .count(&m, ("tools/list", "ok", "modern"), 0.0);
        let text = m.render();
        for line in [
            r#"mcpgate_requests_total{backend="h",era="legacy",method="tools/call",outcome="ok"} 2"#,
            r#"mcpgate_requests_total{backend="none",era="modern",method="tools/list",outcome="ok"} 1"#,
            r#"mcpgate_request_duration_seconds_count{method="tools/call"} 2"#,
            r#"mcpgate_upstream_inflight{backend="h"} 1"#,
            r#"mcpgate_upstream_duration_seconds_count{backend="h"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }
}
