//! One live connection per backend (or per owner), reconnected on demand with
//! exponential backoff.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{BackendError, BackendSpec, Connection, Owner, Resume, UpstreamHandler};

/// Reconnect delay after `failures` consecutive failures: 0.5 s doubling to 30 s,
/// with ±20 % jitter so replicas do not retry in lockstep.
pub fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(500).saturating_mul(1 << failures.min(6).saturating_sub(1));
    let base = base.min(Duration::from_secs(30));
    let mut b = [0u8; 1];
    let _ = getrandom::fill(&mut b);
    let factor = 0.8 + 0.4 * f64::from(b[0]) / 255.0;
    base.mul_f64(factor)
}

/// Holds at most one live connection and (re)connects on demand, with exponential
/// backoff after failures so a broken backend is not hammered.
pub struct Slot {
    current: Mutex<Option<Arc<Connection>>>,
    connecting: tokio::sync::Mutex<Backoff>,
    /// Held by whoever opens this slot's connection with more around it than
    /// [`Slot::get`] does ([`Slot::opening`]).
    opening: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<BackendError>,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(Backoff::default()),
            opening: tokio::sync::Mutex::new(()),
        }
    }
}

impl Slot {
    /// The live connection, if any, without connecting.
    pub fn current(&self) -> Option<Arc<Connection>> {
        let c = self.current.lock().ok()?.clone()?;
        c.is_alive().then_some(c)
    }

    /// [`Slot::current`] for a call that is about to use it: touched
    /// ([`Connection::touch`]) under the lock [`Slot::take_idle`] takes, so a
    /// connection handed out is never taken as idle before its request is in
    /// flight (unless the idle limit is shorter than that moment).
    pub fn current_for_use(&self) -> Option<Arc<Connection>> {
        let current = self.current.lock().ok()?;
        let c = current.as_ref().filter(|c| c.is_alive())?.clone();
        c.touch();
        Some(c)
    }

    /// Takes the connection out of the slot if it is `conn`, alive, has no
    /// request in flight and was unused for at least `min_idle`
    /// ([`Connection::idle_for`]); checked and taken under one lock, the one
    /// [`Slot::current_for_use`] hands connections out under.
    pub fn take_idle(&self, conn: &Arc<Connection>, min_idle: Duration) -> bool {
        let Ok(mut current) = self.current.lock() else {
            return false;
        };
        let idle = current.as_ref().is_some_and(|c| {
            Arc::ptr_eq(c, conn)
                && c.is_alive()
                && c.calls_in_flight() == 0
                && c.idle_for() >= min_idle
        });
        if idle {
            current.take();
        }
        idle
    }

    /// Waits for any other caller's hold, then holds it until the guard is
    /// dropped: callers that do something before connecting (a per-session
    /// connection's reservation against `max_connections`) and after (its
    /// setup) take it, so that concurrent first uses wait for one opening
    /// instead of each doing the "before" part. [`Slot::get`] does not.
    pub async fn opening(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.opening.lock().await
    }

    /// The live connection, connecting first if needed. While in backoff after a
    /// failure, fails at once with the last error.
    pub async fn get(
        &self,
        spec: &BackendSpec,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
    ) -> Result<Arc<Connection>, BackendError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        // Boxed: connecting (handshake, probe, spawn) is rare and its future
        // large; the callers' futures stay small.
        Box::pin(self.connect(spec, owner, handler, capabilities, None)).await
    }

    /// [`Slot::get`] for a per-session connection whose backend session is
    /// recorded elsewhere: a new connection goes on with `resume.recorded`
    /// when there is one and the transport allows (no `initialize`,
    /// `BackendSpec::resume`), and tells `resume.recorder` of the backend
    /// sessions it opens later in place of a forgotten one.
    pub async fn get_recorded(
        &self,
        spec: &BackendSpec,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        resume: Resume,
    ) -> Result<Arc<Connection>, BackendError> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        Box::pin(self.connect(spec, owner, handler, capabilities, Some(resume))).await
    }

    async fn connect(
        &self,
        spec: &BackendSpec,
        owner: Owner,
        handler: Arc<dyn UpstreamHandler>,
        capabilities: Value,
        resume: Option<Resume>,
    ) -> Result<Arc<Connection>, BackendError> {
        let mut backoff = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if let (Some(at), Some(e)) = (backoff.retry_at, &backoff.last_error)
            && Instant::now() < at
        {
            return Err(e.clone());
        }
        let recorded = resume.as_ref().and_then(|r| r.recorded.as_ref());
        let gate = resume.as_ref().and_then(|r| r.gate.clone());
        let resumed = match recorded {
            Some(r) => {
                let (o, h, c) = (owner.clone(), handler.clone(), capabilities.clone());
                spec.resume(o, h, c, r, gate.clone()).await
            }
            None => Ok(None),
        };
        let made = match resumed {
            Ok(Some(c)) => Ok(c),
            Ok(None) => spec.connect(owner, handler, capabilities, gate).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(c) => {
                if let Some(r) = resume {
                    let _ = c.recorder.set(r.recorder);
                }
                *backoff = Backoff::default();
                if let Ok(mut cur) = self.current.lock() {
                    *cur = Some(c.clone());
                }
                Ok(c)
            }
            Err(e) => {
                backoff.failures = backoff.failures.saturating_add(1);
                let secs = 1u64 << backoff.failures.min(5);
                backoff.retry_at = Some(Instant::now() + Duration::from_millis(secs * 250));
                backoff.last_error = Some(e.clone());
                tracing::warn!(backend = %spec.name, cause = %e, failures = backoff.failures, "cannot connect to backend");
                Err(e)
            }
        }
    }

    /// Takes the connection out of the slot (for closing).
    pub fn take(&self) -> Option<Arc<Connection>> {
        self.current.lock().ok()?.take()
    }
}
