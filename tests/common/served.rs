//! `mcpgate serve` as its own process, for tests about what survives a restart
//! or holds across processes: started on 127.0.0.1:0 with a given config and
//! environment, its address read from its JSON log, stopped by its pid.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::time::Instant;

use super::{TestDir, fake_stdio};

/// One `mcpgate serve` process; killed (SIGKILL) when dropped.
pub struct Served {
    child: Child,
    /// The MCP endpoint URL.
    pub url: String,
    log: std::path::PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `mcpgate serve` (`bin`) with `server` lines added to `[server]`
    /// (listen and metrics are set here) and the rest of the `config`, written
    /// into `dir` as `NAME.toml`, and `env` added; waits for "mcpgate listening".
    pub async fn start(
        bin: &str,
        dir: &TestDir,
        name: &str,
        (server, config): (&str, &str),
        env: &[(&str, &str)],
    ) -> Served {
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\nshutdown_grace = \"2s\"\n{server}\n{config}"
        );
        let toml = dir.path(&format!("{name}.toml"));
        std::fs::write(&toml, config).unwrap();
        let log = dir.path(&format!("{name}.log"));
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--config"])
            .arg(&toml)
            .env("FAKE_STDIO", fake_stdio())
            .env("TEST_DIR", &dir.0)
            .env("MCPGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env_remove("MCPGATE_LISTEN")
            .env_remove("MCPGATE_METRICS_LISTEN")
            .env_remove("MCPGATE_SESSION_KEYS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut served = Served {
            child: cmd.spawn().unwrap(),
            url: String::new(),
            log,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Some(addr) = served.logged("mcpgate listening", "addr") {
                served.url = format!("http://{addr}/mcp");
                return served;
            }
            if let Ok(Some(status)) = served.child.try_wait() {
                panic!("mcpgate exited with {status}:\n{}", served.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("mcpgate did not start:\n{}", served.log());
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Field `field` of the first log line whose message is `message`.
    pub fn logged(&self, message: &str, field: &str) -> Option<String> {
        self.log().lines().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["fields"]["message"] == message)
                .then(|| v["fields"][field].as_str().map(str::to_owned))?
        })
    }

    /// Whether some log line's message contains `text`.
    pub fn logged_message(&self, text: &str) -> bool {
        self.log().lines().any(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["fields"]["message"].as_str().map(|m| m.contains(text)))
                .unwrap_or(false)
        })
    }

    /// Stops the process with `signal` and waits until it exited.
    pub async fn stop(mut self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), signal);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("mcpgate did not stop on {signal:?}:\n{}", self.log());
    }
}
