//! The authenticator in force, replaceable by a hot reload of `[auth]`.
//!
//! A request loads the current [`Authenticator`] once and uses it for every
//! check it makes, so a reload never mixes the old and new settings within one
//! request. Each authenticator's background key refresh runs under its own
//! cancellation token, cancelled when it is replaced.

use std::sync::{Arc, Mutex, RwLock};

use tokio_util::sync::CancellationToken;

use super::Authenticator;

/// The current [`Authenticator`] and its key refresh.
pub struct AuthHandle {
    current: RwLock<Arc<Authenticator>>,
    refresh: Mutex<CancellationToken>,
    stop: CancellationToken,
}

impl AuthHandle {
    /// Puts `auth` in force and starts its key refresh, which ends with `stop`.
    pub fn start(auth: Arc<Authenticator>, stop: &CancellationToken) -> Arc<AuthHandle> {
        let refresh = stop.child_token();
        auth.start(&refresh);
        Arc::new(AuthHandle {
            current: RwLock::new(auth),
            refresh: Mutex::new(refresh),
            stop: stop.clone(),
        })
    }

    /// The authenticator in force.
    pub fn current(&self) -> Arc<Authenticator> {
        self.current
            .read()
            .map(|a| a.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Puts `new` in force (its keys are fetched afresh) and stops the old
    /// one's refresh. Requests already past authentication are unaffected; the
    /// server face takes `new` (and the metadata paths it serves) with the rest
    /// of a reload.
    pub fn replace(&self, new: Arc<Authenticator>) {
        let refresh = self.stop.child_token();
        new.start(&refresh);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = new;
        let old_refresh = std::mem::replace(
            &mut *self.refresh.lock().unwrap_or_else(|e| e.into_inner()),
            refresh,
        );
        old_refresh.cancel();
    }
}
