//! Pacing of the catalogue refreshes a backend asks for with `list_changed`.
//!
//! A burst of notifications settles into one refresh after a quiet period; a
//! backend is re-listed at most once per interval; and the interval doubles, up
//! to a cap, every time a refresh finds the lists unchanged. A backend that
//! announces a change after every list (a notification storm) is therefore
//! re-listed less and less often instead of in a loop, and a refresh that finds
//! a real change resets the interval. Pure bookkeeping: the supervisor sleeps.

use std::time::Duration;

use tokio::time::Instant;

/// Notifications within this period of each other become one refresh.
pub const QUIET: Duration = Duration::from_millis(100);
/// Shortest time between the end of one refresh and the start of the next.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Longest: a storming backend is still re-listed this often, so a real change
/// among its empty announcements is seen within this time.
pub const MAX_INTERVAL: Duration = Duration::from_secs(30);

/// After this many unchanged refreshes in a row the backend is reported (once).
const REPORT_AFTER: u32 = 3;

/// One backend's refresh pace.
#[derive(Debug, Default)]
pub struct Pace {
    /// When the last refresh started (while `running`) or finished.
    last: Option<Instant>,
    running: bool,
    /// Refreshes in a row that found nothing changed.
    unchanged: u32,
}

impl Pace {
    /// The current interval: [`MIN_INTERVAL`] doubled per unchanged refresh in a
    /// row, at most [`MAX_INTERVAL`].
    pub fn interval(&self) -> Duration {
        MIN_INTERVAL
            .saturating_mul(1 << self.unchanged.min(16))
            .min(MAX_INTERVAL)
    }

    /// How long from `now` until a refresh may start (zero: now). While one is
    /// running, at least an interval: ask again then.
    pub fn until_due(&self, now: Instant) -> Duration {
        match (self.running, self.last) {
            (true, _) => self.interval(),
            (false, Some(last)) => (last + self.interval()).saturating_duration_since(now),
            (false, None) => Duration::ZERO,
        }
    }

    /// A refresh starts at `now`.
    pub fn started(&mut self, now: Instant) {
        self.running = true;
        self.last = Some(now);
    }

    /// The refresh finished at `now`; `changed`: it found different lists (a
    /// failed refresh counts as unchanged). Returns the new interval when the
    /// backend has just become a storm worth reporting.
    pub fn finished(&mut self, now: Instant, changed: bool) -> Option<Duration> {
        self.running = false;
        self.last = Some(now);
        if changed {
            self.unchanged = 0;
            return None;
        }
        self.unchanged = self.unchanged.saturating_add(1);
        (self.unchanged == REPORT_AFTER).then(|| self.interval())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_refresh_is_due_at_once_then_spaced() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        assert_eq!(p.until_due(t0), Duration::ZERO);
        p.started(t0);
        assert_eq!(p.until_due(t0), MIN_INTERVAL, "running: ask again later");
        assert_eq!(p.finished(t0, true), None);
        assert_eq!(p.until_due(t0), MIN_INTERVAL);
        assert_eq!(p.until_due(t0 + MIN_INTERVAL), Duration::ZERO);
    }

    #[test]
    fn unchanged_refreshes_back_off_to_the_cap_and_a_change_resets() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        let mut intervals = Vec::new();
        let mut reported = Vec::new();
        for _ in 0..8 {
            p.started(t0);
            if let Some(i) = p.finished(t0, false) {
                reported.push(i);
            }
            intervals.push(p.interval().as_secs());
        }
        assert_eq!(intervals, [2, 4, 8, 16, 30, 30, 30, 30]);
        assert_eq!(reported, [Duration::from_secs(8)], "reported once");
        p.started(t0);
        p.finished(t0, true);
        assert_eq!(p.interval(), MIN_INTERVAL);
    }
}
