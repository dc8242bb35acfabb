//! `[telemetry]`: OpenTelemetry traces, exported over OTLP/HTTP (protobuf). Off
//! unless `otlp_endpoint` is set; a change takes effect at the next restart.

use serde::Deserialize;

use super::ConfigProblem;

/// `[telemetry]`: where traces go and how many are kept.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector, e.g. `http://otel-collector:4318`: spans are POSTed
    /// as protobuf to `{otlp_endpoint}/v1/traces` (a URL whose path already ends in
    /// `/v1/traces` is used as given). Absent: no tracing at all (nothing is
    /// installed, no span is made, no `traceparent` is read or sent).
    pub otlp_endpoint: Option<String>,
    /// The fraction of new traces that are sampled, 0.0 to 1.0. Parent-based: a
    /// request that continues a host's trace follows the host's sampled flag, so
    /// this ratio applies to traces the gateway starts. Default 1.0.
    pub sampling_ratio: f64,
    /// The `service.name` of the exported spans. Default `mcpgate`.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            sampling_ratio: 1.0,
            service_name: "mcpgate".into(),
        }
    }
}

/// The OTLP/HTTP signal path of traces (OTLP specification, OTLP/HTTP).
const TRACES_PATH: &str = "/v1/traces";

impl TelemetryConfig {
    /// The URL spans are POSTed to, if tracing is on: `otlp_endpoint` with
    /// [`TRACES_PATH`] appended unless its path already ends with it.
    pub fn traces_url(&self) -> Option<String> {
        let base = self.otlp_endpoint.as_deref()?;
        let url = url::Url::parse(base).ok()?;
        if url.path().ends_with(TRACES_PATH) {
            return Some(url.to_string());
        }
        let mut s = url.to_string();
        while s.ends_with('/') {
            s.pop();
        }
        Some(format!("{s}{TRACES_PATH}"))
    }
}

/// The problems of `[telemetry]`, each naming its field.
pub(super) fn validate(t: &TelemetryConfig, p: &mut Vec<ConfigProblem>) {
    if let Some(endpoint) = &t.otlp_endpoint {
        match url::Url::parse(endpoint) {
            Ok(u) if !matches!(u.scheme(), "http" | "https") => p.push(ConfigProblem::new(
                "telemetry.otlp_endpoint",
                format!("must be an http:// or https:// URL, not {}://", u.scheme()),
            )),
            Ok(u) if u.host_str().is_none_or(str::is_empty) => p.push(ConfigProblem::new(
                "telemetry.otlp_endpoint",
                "must name a host",
            )),
            Ok(u) if u.query().is_some() || u.fragment().is_some() => p.push(ConfigProblem::new(
                "telemetry.otlp_endpoint",
                "must have no query or fragment",
            )),
            Ok(_) => {}
            Err(e) => p.push(ConfigProblem::new(
                "telemetry.otlp_endpoint",
                format!("not a URL: {e}"),
            )),
        }
    }
    if !(0.0..=1.0).contains(&t.sampling_ratio) {
        p.push(ConfigProblem::new(
            "telemetry.sampling_ratio",
            format!("must be between 0.0 and 1.0, not {}", t.sampling_ratio),
        ));
    }
    if t.service_name.trim().is_empty() {
        p.push(ConfigProblem::new(
            "telemetry.service_name",
            "must not be empty",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(t: &TelemetryConfig) -> Vec<String> {
        let mut p = Vec::new();
        validate(t, &mut p);
        p.iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn endpoint_gets_the_traces_path_once() {
        let mut t = TelemetryConfig::default();
        assert_eq!(t.traces_url(), None);
        t.otlp_endpoint = Some("http://collector:4318".into());
        assert_eq!(
            t.traces_url().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        t.otlp_endpoint = Some("http://collector:4318/otlp/".into());
        assert_eq!(
            t.traces_url().as_deref(),
            Some("http://collector:4318/otlp/v1/traces")
        );
        t.otlp_endpoint = Some("https://c.example/v1/traces".into());
        assert_eq!(
            t.traces_url().as_deref(),
            Some("https://c.example/v1/traces")
        );
    }

    #[test]
    fn problems_name_their_field() {
        let t = TelemetryConfig {
            otlp_endpoint: Some("grpc://collector:4317".into()),
            sampling_ratio: 1.5,
            service_name: " ".into(),
        };
        let p = problems(&t);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].starts_with("telemetry.otlp_endpoint: must be an http"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("telemetry.sampling_ratio: must be between"),
            "{p:?}"
        );
        assert!(p[2].starts_with("telemetry.service_name"), "{p:?}");
        let t = TelemetryConfig {
            otlp_endpoint: Some("not a url".into()),
            sampling_ratio: f64::NAN,
            ..TelemetryConfig::default()
        };
        let p = problems(&t);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(problems(&TelemetryConfig::default()).is_empty());
    }
}
