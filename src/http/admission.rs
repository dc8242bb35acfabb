//! Room for a new session under `server.max_sessions` and the client's
//! `server.max_sessions_per_client`: one client (principal, or address
//! through `trusted_proxies`) cannot take every session, and sessions that
//! were opened and never used cannot keep new hosts out. At either limit the
//! oldest session never used after `initialize` (no request, no GET stream)
//! that is at least [`UNUSED_GRACE`] old is ended to make room — the client's
//! own at its share, any client's at the cap — and its id then gets 404 (the
//! host re-initializes, MCP 2025-11-25 basic/transports). With a shared store
//! its record ends too, before anything else, so no replica restores it.
//! Refusals (WARN) and evictions (INFO) are logged once, then summarized at
//! most every [`SUMMARY_EVERY`] ([`LimitLog`]); every refusal is counted in
//! `mcpgate_rejections_total`, every eviction in
//! `mcpgate_sessions_evicted_total`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::header;
use tokio::time::Instant;

use super::{AppState, HttpError};
use crate::auth::ClientKey;
use crate::session::Session;

/// How old a never-used session must be before it may be ended to make room:
/// a host sends its first request right after `initialize`.
pub const UNUSED_GRACE: Duration = Duration::from_secs(5);

/// At most one summary of refusals per this long.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// How many times an insert is retried after making room (another
/// `initialize` may take the place first).
const ATTEMPTS: usize = 3;

/// Puts the new `session` in the store, ending a never-used session to make
/// room at a limit (module docs).
///
/// Errors: 429 + `Retry-After` at the client's share, 503 + `Retry-After` at
/// the cap, when nothing can be ended.
pub(super) async fn admit(st: &AppState, session: &Arc<Session>) -> Result<(), HttpError> {
    let client = ClientKey::of(session.principal(), session.client());
    let mut attempt = 0;
    let full = loop {
        let full = match st.sessions.insert(session.clone()) {
            Ok(()) => return Ok(()),
            Err(full) => full,
        };
        attempt += 1;
        if attempt > ATTEMPTS {
            break full;
        }
        let whose = client.as_ref().filter(|_| full.per_client);
        if !make_room(st, whose).await {
            break full;
        }
    };
    st.limit_log.refused(setting(full.per_client), full.limit);
    let retry = super::mcp::session_cap_retry_after(st);
    let e = match full.per_client {
        true => HttpError::too_many_client_sessions(full.limit),
        false => HttpError::too_many_sessions(),
    };
    Err(e.with_header(header::RETRY_AFTER, retry))
}

/// The setting a refusal hit.
fn setting(per_client: bool) -> &'static str {
    match per_client {
        true => "server.max_sessions_per_client",
        false => "server.max_sessions",
    }
}

/// Ends the oldest never-used session of `client` (`None`: of any client)
/// that is at least [`UNUSED_GRACE`] old; whether there was one.
pub(super) async fn make_room(st: &AppState, client: Option<&ClientKey>) -> bool {
    let Some(evicted) = st.sessions.evict_unused(client, UNUSED_GRACE) else {
        return false;
    };
    let reason = match client {
        Some(_) => "per_client",
        None => "max_sessions",
    };
    st.metrics
        .sessions_evicted
        .with_label_values(&[reason])
        .inc();
    st.limit_log.evicted(&evicted, reason);
    end_evicted(st, evicted).await;
    true
}

/// Ends an evicted session's live state here, in the background. Without a
/// shared store it ends as a `DELETE` ends it (its id is then 404). With one,
/// only this replica's copy goes, as at idle expiry: "never used" is what this
/// replica saw, and under a balancer without affinity the session may be in
/// use on another replica; its record lives on (until its TTL) and a later
/// request restores it on any replica.
async fn end_evicted(st: &AppState, session: Arc<Session>) {
    let supervisor = st.supervisor.clone();
    match st.supervisor.shared().is_some() {
        true => tokio::spawn(async move { supervisor.end_session_here(&session).await }),
        false => tokio::spawn(async move { supervisor.end_session(&session).await }),
    };
}

/// The log lines of the session limits, throttled: under a flood each
/// `initialize` would otherwise write one. Refusals (WARN) and evictions
/// (INFO): the first, then at most one per [`SUMMARY_EVERY`] with how many
/// there were since the last line (each eviction also at DEBUG; every one is
/// counted in the metrics).
#[derive(Default)]
pub struct LimitLog {
    refusals: Mutex<Throttle>,
    evictions: Mutex<Throttle>,
}

#[derive(Default)]
struct Throttle {
    /// When the last line was written.
    last: Option<Instant>,
    /// Events since then, not yet in a line.
    unlogged: u64,
}

impl LimitLog {
    /// Records a session refused at `setting` (its value `limit`), at
    /// `initialize` or at a restore; logs it when a line is due.
    pub fn refused(&self, setting: &str, limit: usize) {
        if let Some(count) = due(&self.refusals, Instant::now()) {
            tracing::warn!(
                setting,
                limit,
                refused = count,
                "session limit reached; a new session was refused ({count} since the last such line; at most one line per {}s)",
                SUMMARY_EVERY.as_secs()
            );
        }
    }

    /// Records that `session` was ended to make room at limit `reason`
    /// (`max_sessions`, `per_client`); logs it when a line is due.
    pub fn evicted(&self, session: &Session, reason: &str) {
        let client = ClientKey::of(session.principal(), session.client()).map(|c| c.to_string());
        let client = client.as_deref().unwrap_or("unknown");
        tracing::debug!(session = %session.log_id(), client, limit = reason,
            "a never-used session was ended to make room");
        if let Some(count) = due(&self.evictions, Instant::now()) {
            tracing::info!(
                session = %session.log_id(),
                client,
                limit = reason,
                evicted = count,
                "sessions never used after initialize were ended to make room for new ones ({count} since the last such line; at most one line per {}s)",
                SUMMARY_EVERY.as_secs()
            );
        }
    }
}

impl LimitLog {
    /// Writes the summaries still owed: events counted after a window's line
    /// when no later event came to write them once the window closed (a flood
    /// of 568 refusals was logged as `refused=1`). Called by the idle sweep,
    /// so such a line comes within a sweep period (at most 30 s) of its window.
    pub fn flush(&self) {
        let now = Instant::now();
        if let Some(count) = owed(&self.refusals, now) {
            tracing::warn!(
                refused = count,
                "session limit reached; {count} more new sessions were refused since the last such line"
            );
        }
        if let Some(count) = owed(&self.evictions, now) {
            tracing::info!(
                evicted = count,
                "{count} more sessions never used after initialize were ended to make room since the last such line"
            );
        }
    }
}

/// Events counted but not yet in a line, once `throttle`'s window closed at
/// `now` (then a line is written: the window starts again).
fn owed(throttle: &Mutex<Throttle>, now: Instant) -> Option<u64> {
    let mut t = throttle.lock().unwrap_or_else(|e| e.into_inner());
    let closed = t
        .last
        .is_none_or(|last| now.saturating_duration_since(last) >= SUMMARY_EVERY);
    if t.unlogged == 0 || !closed {
        return None;
    }
    t.last = Some(now);
    Some(std::mem::take(&mut t.unlogged))
}

/// Counts an event at `now`: `Some(events to report)` when a line is due.
fn due(throttle: &Mutex<Throttle>, now: Instant) -> Option<u64> {
    let mut t = throttle.lock().unwrap_or_else(|e| e.into_inner());
    t.unlogged += 1;
    match t.last {
        Some(last) if now.saturating_duration_since(last) < SUMMARY_EVERY => None,
        _ => {
            t.last = Some(now);
            Some(std::mem::take(&mut t.unlogged))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn logs_the_first_refusal_then_one_summary_per_window() {
        let log = Mutex::new(Throttle::default());
        assert_eq!(due(&log, Instant::now()), Some(1), "the first one");
        for _ in 0..99 {
            assert_eq!(due(&log, Instant::now()), None);
        }
        tokio::time::advance(SUMMARY_EVERY / 2).await;
        assert_eq!(due(&log, Instant::now()), None, "within the window");
        tokio::time::advance(SUMMARY_EVERY / 2).await;
        assert_eq!(
            due(&log, Instant::now()),
            Some(101),
            "the summary counts every event since the last line"
        );
        assert_eq!(due(&log, Instant::now()), None);
        tokio::time::advance(SUMMARY_EVERY).await;
        assert_eq!(due(&log, Instant::now()), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn what_no_later_event_reported_is_flushed_once_the_window_closed() {
        let log = Mutex::new(Throttle::default());
        assert_eq!(owed(&log, Instant::now()), None, "nothing counted");
        assert_eq!(due(&log, Instant::now()), Some(1));
        for _ in 0..567 {
            assert_eq!(due(&log, Instant::now()), None);
        }
        assert_eq!(owed(&log, Instant::now()), None, "the window is open");
        tokio::time::advance(SUMMARY_EVERY).await;
        assert_eq!(owed(&log, Instant::now()), Some(567), "the rest, once");
        assert_eq!(owed(&log, Instant::now()), None);
        tokio::time::advance(SUMMARY_EVERY).await;
        assert_eq!(owed(&log, Instant::now()), None, "nothing new");
    }
}
