//! Handing the memory of a mass session expiry back to the OS.
//!
//! jemalloc (the binary's allocator, `main.rs`) keeps up to ~200 freed objects
//! per size class in each thread's cache (tcache). After 10,000 sessions expire
//! those objects lie on as many different slabs, which stay resident: RSS stayed
//! 3–33 % above the baseline (bench/README.md, perf4). After a mass expiry the
//! reaper calls [`request_release`]; every tokio worker then flushes its cache
//! when it next parks ([`on_park`], the runtime's `on_thread_park` hook that
//! `main.rs` installs) and purges the arenas' unused pages, so the memory comes
//! back at once rather than never (cached objects) or after the decay period.
//!
//! Without the hook (the tests' runtimes) a request is only counted.

use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Release requests so far (mass expiries).
static REQUESTED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last request this thread acted on.
    static DONE: Cell<u64> = const { Cell::new(0) };
}

/// Asks every thread that runs [`on_park`] to flush its allocator cache and
/// purge unused pages, once, the next time it parks.
pub fn request_release() {
    REQUESTED.fetch_add(1, Ordering::Release);
}

/// After a mass free on this (non-worker) thread: releases this thread's cache,
/// asks for a release on every worker and makes each of them run briefly and
/// park again, so that [`on_park`] acts there now, not whenever the worker next
/// has work. One task per worker, each holding its worker for a millisecond so
/// that the next is taken by another (tokio wakes an idle worker when a
/// searching one finds work); a worker that missed them acts when it next parks.
pub fn release_everywhere(runtime: &tokio::runtime::Handle) {
    release_here();
    request_release();
    for _ in 0..runtime.metrics().num_workers() {
        runtime.spawn(async { std::thread::sleep(Duration::from_millis(1)) });
    }
}

/// The runtime's `on_thread_park` hook: acts on a pending [`request_release`]
/// (once per request and thread); otherwise an atomic load and a thread-local
/// read, run each time a worker goes idle.
pub fn on_park() {
    let wanted = REQUESTED.load(Ordering::Acquire);
    if DONE.with(|d| d.replace(wanted)) != wanted {
        release_here();
    }
}

/// Flushes this thread's jemalloc cache (its objects go back to their slabs;
/// slabs left empty become unused pages) and purges the unused pages of every
/// arena (`madvise`, so RSS drops now). Failures (a thread without a cache)
/// are logged at debug level and otherwise ignored: memory stays as it was.
pub fn release_here() {
    for name in [c"thread.tcache.flush", c"arena.4096.purge"] {
        let rc = mallctl_void(name);
        if rc != 0 {
            tracing::debug!(control = ?name, errno = rc, "jemalloc control failed");
        }
    }
}

/// Runs jemalloc control `name`, one that reads and writes no value (jemalloc(3):
/// `thread.tcache.flush` and `arena.<i>.purge` are `(void) --`; 4096 is
/// `MALLCTL_ARENAS_ALL`). Returns jemalloc's error number, 0 on success.
#[allow(unsafe_code)]
fn mallctl_void(name: &CStr) -> i32 {
    let null = std::ptr::null_mut::<c_void>();
    // SAFETY: `name` is NUL-terminated and outlives the call; a `(void)` control
    // takes no old or new value, for which jemalloc expects exactly null pointers
    // and a zero length (it answers EPERM otherwise); nothing is read or written
    // through them.
    unsafe { tikv_jemalloc_sys::mallctl(name.as_ptr(), null, std::ptr::null_mut(), null, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controls_exist_and_take_no_value() {
        // jemalloc answers ENOENT for an unknown name and EPERM when a value is
        // passed to a (void) control: 0 means both names and calls are right.
        assert_eq!(mallctl_void(c"thread.tcache.flush"), 0);
        assert_eq!(mallctl_void(c"arena.4096.purge"), 0);
        assert_ne!(mallctl_void(c"thread.tcache.no_such_control"), 0);
    }

    #[test]
    fn a_request_is_acted_on_once_per_thread() {
        let acted = || {
            let before = DONE.with(Cell::get);
            on_park();
            DONE.with(Cell::get) != before
        };
        on_park();
        assert!(!acted(), "nothing requested since the last park");
        request_release();
        assert!(acted(), "a request is acted on at the next park");
        assert!(!acted(), "and only once");
        // Another thread acts on the same request itself.
        assert!(std::thread::spawn(acted).join().unwrap());
    }
}
