//! What the supervisor last saw of a backend's shared (or catalogue)
//! connection: when it came up, how often it was reconnected, and the last
//! failure. Read by the admin endpoint `/admin/backends`.

use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Value, json};

/// Connection history of one backend (interior mutability; cheap to update).
#[derive(Debug, Default)]
pub struct BackendHealth(Mutex<HealthRecord>);

#[derive(Debug, Default)]
struct HealthRecord {
    up_since: Option<SystemTime>,
    restarts: u64,
    last_error: Option<(SystemTime, String)>,
}

impl BackendHealth {
    /// A connection attempt succeeded now; `restart`: not the first one.
    pub fn connected(&self, restart: bool) {
        if let Ok(mut h) = self.0.lock() {
            h.up_since = Some(SystemTime::now());
            h.restarts += u64::from(restart);
        }
    }

    /// The connection failed or was lost now, because of `cause`.
    pub fn failed(&self, restart: bool, cause: &str) {
        if let Ok(mut h) = self.0.lock() {
            h.up_since = None;
            h.restarts += u64::from(restart);
            h.last_error = Some((SystemTime::now(), cause.to_owned()));
        }
    }

    /// The connection closed (lost, or failed its health ping) without an error
    /// of its own: `cause` says which.
    pub fn lost(&self, cause: &str) {
        self.failed(false, cause);
    }

    /// As JSON: `{"up_since": RFC3339|null, "restarts": N, "last_error":
    /// {"at": RFC3339, "cause": STRING}|null}` (times in UTC, seconds).
    pub fn snapshot(&self) -> Value {
        let Ok(h) = self.0.lock() else {
            return Value::Null;
        };
        json!({
            "up_since": h.up_since.map(rfc3339),
            "restarts": h.restarts,
            "last_error": h.last_error.as_ref().map(|(at, cause)| json!({"at": rfc3339(*at), "cause": cause})),
        })
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_restarts_and_the_last_failure() {
        let h = BackendHealth::default();
        assert_eq!(h.snapshot()["restarts"], 0);
        assert!(h.snapshot()["up_since"].is_null());
        h.connected(false);
        assert!(h.snapshot()["up_since"].as_str().unwrap().ends_with('Z'));
        h.lost("connection closed");
        h.failed(true, "spawn failed: No such file");
        h.connected(true);
        let s = h.snapshot();
        assert_eq!(s["restarts"], 2);
        assert_eq!(s["last_error"]["cause"], "spawn failed: No such file");
        assert!(s["up_since"].is_string());
    }
}
