//! Whether this process owns a session's per-session stdio children (with a
//! shared store, `cluster::Claim`), and whether another replica's children
//! list for it what their backends' catalogues do not.

use std::sync::atomic::Ordering;

use super::Session;

/// `LiveState::owned`: not owned here.
pub(super) const NOT_OWNED: u8 = 0;
/// `LiveState::owned`: owned here.
pub(super) const OWNED: u8 = 1;
/// `LiveState::owned`: owned here before this replica was fenced, not
/// checked against the store since (requests claim again).
pub(super) const FENCED: u8 = 2;

impl Session {
    /// Whether this process owns the session's per-session stdio children
    /// (with a shared store; `cluster::Claim`).
    pub fn is_owned(&self) -> bool {
        self.live.owned.load(Ordering::Relaxed) == OWNED
    }

    /// Whether this process owns the session's children, or did when it was
    /// fenced and has not learnt otherwise since: where a host's cancel or
    /// roots change may still be needed (the children still run).
    pub fn may_own(&self) -> bool {
        self.live.owned.load(Ordering::Relaxed) != NOT_OWNED
    }

    /// Sets whether this process owns the session's children; whether it
    /// changed from or to owned (a fenced mark cleared is no change). Ordered
    /// with [`Session::end`]: a mark set after an end's unmark sees the
    /// session ended.
    pub fn set_owned(&self, owned: bool) -> bool {
        let to = if owned { OWNED } else { NOT_OWNED };
        let was = self.live.owned.swap(to, Ordering::AcqRel);
        (was == OWNED) != owned
    }

    /// Turns an owned mark into a fenced one (see [`Session::may_own`]);
    /// whether the session was owned.
    pub fn fence_owned(&self) -> bool {
        self.live
            .owned
            .compare_exchange(OWNED, FENCED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether the session's owner, another replica, lists for it what this
    /// replica's catalogue does not (`cluster::Ctl::OwnLists`, the record's
    /// `ol`): its list requests are handed to the owner.
    pub fn lists_elsewhere(&self) -> bool {
        self.live.lists_elsewhere.load(Ordering::Relaxed)
    }

    /// Sets [`Session::lists_elsewhere`].
    pub fn set_lists_elsewhere(&self, on: bool) {
        self.live.lists_elsewhere.store(on, Ordering::Relaxed);
    }
}
