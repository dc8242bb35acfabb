//! `mcpgate serve` as its own process (for signals: SIGTERM, SIGKILL by pid),
//! killed when the test drops it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{TestDir, fake_stdio};

const MCPGATE: &str = env!("CARGO_BIN_EXE_mcpgate");

/// A running `mcpgate serve`.
pub struct Served {
    child: Child,
    /// The MCP endpoint URL.
    pub url: String,
    /// `http://ADDR`, for `/healthz` and `/readyz`.
    pub base: String,
    /// The test's directory: `gw.toml`, `gw.log` (JSON lines) and `${TEST_DIR}`.
    pub dir: TestDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `mcpgate serve` with `config` (`${FAKE_STDIO}` and `${TEST_DIR}`
    /// defined) and waits until it listens.
    pub async fn start(config: &str) -> Served {
        let dir = TestDir::new();
        std::fs::write(dir.path("gw.toml"), config).unwrap();
        let log = std::fs::File::create(dir.path("gw.log")).unwrap();
        let child = Command::new(MCPGATE)
            .args(["serve", "--config"])
            .arg(dir.path("gw.toml"))
            .env("FAKE_STDIO", fake_stdio())
            .env("TEST_DIR", &dir.0)
            .env("MCPGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env_remove("MCPGATE_LISTEN")
            .env_remove("MCPGATE_METRICS_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut served = Served {
            child,
            url: String::new(),
            base: String::new(),
            dir,
        };
        let end = Instant::now() + Duration::from_secs(8);
        while Instant::now() < end {
            let addr = served.log().lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                (v["fields"]["message"] == "mcpgate listening")
                    .then(|| v["fields"]["addr"].as_str().map(str::to_owned))?
            });
            if let Some(addr) = addr {
                served.base = format!("http://{addr}");
                served.url = format!("http://{addr}/mcp");
                return served;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("mcpgate did not start:\n{}", served.log());
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal).unwrap();
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("gw.log")).unwrap_or_default()
    }

    /// Waits for the process to exit; its status code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}
