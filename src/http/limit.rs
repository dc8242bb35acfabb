//! Per-client request rate limit (`[server.rate_limit]`), a keyed token bucket
//! from the `governor` crate. Clients are keyed by their authenticated principal
//! when there is one, else by their IP address.

use std::net::IpAddr;
use std::num::NonZeroU32;

use axum::http::{HeaderValue, StatusCode, header};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::HttpError;
use crate::auth::Principal;
use crate::config::RateLimit;
use crate::jsonrpc;
use crate::request::Rejection;

/// The limiter shared by all requests.
pub struct Limiter {
    buckets: DefaultKeyedRateLimiter<String>,
}

impl Limiter {
    /// A limiter allowing `per_second` sustained and `burst` at once per client.
    pub fn new(limit: RateLimit) -> Option<Limiter> {
        let per_second = NonZeroU32::new(limit.per_second)?;
        let burst = NonZeroU32::new(limit.burst.unwrap_or(limit.per_second))?;
        Some(Limiter {
            buckets: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
        })
    }

    /// 429 with `Retry-After` once the client (its principal, else its IP
    /// address) exceeds its rate.
    pub fn check(
        &self,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) -> Result<(), HttpError> {
        let key = match (principal, client) {
            (Some(p), _) => format!("{}\u{0}{}", p.issuer, p.subject),
            (None, Some(ip)) => ip.to_string(),
            (None, None) => "unknown".to_owned(),
        };
        let Err(not_until) = self.buckets.check_key(&key) else {
            return Ok(());
        };
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let refused = HttpError::new(
            Rejection::RateLimited,
            StatusCode::TOO_MANY_REQUESTS,
            jsonrpc::TRANSPORT_ERROR,
            "Too Many Requests: rate limit exceeded",
        );
        Err(match HeaderValue::from_str(&secs.max(1).to_string()) {
            Ok(v) => refused.with_header(header::RETRY_AFTER, v),
            Err(_) => refused,
        })
    }

    /// Forgets idle clients (called periodically so the key set stays bounded).
    pub fn forget_idle(&self) {
        self.buckets.retain_recent();
        self.buckets.shrink_to_fit();
    }
}
