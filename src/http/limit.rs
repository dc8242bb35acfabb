//! Per-client request rate limit (`[server.rate_limit]`), a keyed token bucket
//! from the `governor` crate. Clients are keyed by their authenticated principal
//! when there is one, else by their IP address.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::HttpError;
use crate::auth::Principal;
use crate::config::RateLimit;
use crate::jsonrpc;
use crate::metrics::Metrics;

/// The limiter shared by all requests.
pub struct Limiter {
    buckets: DefaultKeyedRateLimiter<String>,
    metrics: Arc<Metrics>,
}

impl Limiter {
    /// A limiter allowing `per_second` sustained and `burst` at once per client.
    pub fn new(limit: RateLimit, metrics: Arc<Metrics>) -> Option<Limiter> {
        let per_second = NonZeroU32::new(limit.per_second)?;
        let burst = NonZeroU32::new(limit.burst.unwrap_or(limit.per_second))?;
        Some(Limiter {
            buckets: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
            metrics,
        })
    }

    /// Forgets idle clients (called periodically so the key set stays bounded).
    pub fn forget_idle(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
    }
}

/// Middleware: 429 with `Retry-After` once a client exceeds its rate.
pub async fn limit(State(l): State<Arc<Limiter>>, req: Request, next: Next) -> Response {
    let key = match (
        req.extensions().get::<Arc<Principal>>(),
        req.extensions().get::<ConnectInfo<SocketAddr>>(),
    ) {
        (Some(p), _) => format!("{}\u{0}{}", p.issuer, p.subject),
        (None, Some(ConnectInfo(addr))) => addr.ip().to_string(),
        (None, None) => "unknown".to_owned(),
    };
    match l.buckets.check_key(&key) {
        Ok(()) => next.run(req).await,
        Err(not_until) => {
            l.metrics
                .rejections
                .with_label_values(&["rate_limited"])
                .inc();
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let mut resp = HttpError::new(
                StatusCode::TOO_MANY_REQUESTS,
                jsonrpc::TRANSPORT_ERROR,
                "Too Many Requests: rate limit exceeded",
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
    }
}
