//! The shared session store for the instruction step's `_cluster` scenarios: a
//! Redis of the run's own (Debian's `redis-server`, no persistence) and the
//! `[cluster]` table that points the counted gateway at it, so that the cost of
//! `[cluster]` on a plain call is a figure next to the same scenario without it
//! (issue 11: with `[cluster]` on, gateway CPU per call ≤ 1.10× off).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::procs::{Proc, free_port, wait_port};

/// One session key line (`KID:BASE64`, 32 bytes: 0, 1, …, 31). A benchmark key,
/// public on purpose: it seals the run's throw-away sessions only.
const KEY_LINE: &str = "bench:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n";

/// A Redis for the run, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Store {
    _redis: Proc,
    /// The `[cluster]` table for a gateway config (`redis` URL and key file).
    pub table: String,
}

impl Store {
    /// Starts `redis-server` on a free loopback port with no persistence and
    /// writes the key file into `tmp`. Errors: `redis-server` missing (install
    /// the Debian package `redis-server`) or not listening within 10 s.
    pub async fn start(tmp: &Path) -> anyhow::Result<Store> {
        let port = free_port()?;
        let mut redis = Proc::spawn(
            "redis-instr",
            Path::new("redis-server"),
            &[
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            &tmp.join("redis-instr.log"),
        )
        .context("the _cluster scenarios need redis-server (apt-get install redis-server)")?;
        wait_port(&mut redis, port, Duration::from_secs(10)).await?;
        let keys = tmp.join("instr-session-keys");
        std::fs::write(&keys, KEY_LINE).with_context(|| format!("writing {}", keys.display()))?;
        let table = format!(
            "[cluster]\nsession_keys_file = \"{}\"\nredis = \"redis://127.0.0.1:{port}/0\"\n",
            keys.display()
        );
        Ok(Store {
            _redis: redis,
            table,
        })
    }
}
