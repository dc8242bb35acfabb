//! `mcpgate serve` as its own process, for what needs a real process: signals
//! (SIGTERM, SIGKILL by pid), restarts, several processes side by side. Its
//! address is read from its JSON log; it is killed when the test drops it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
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
        Served::start_with_env(config, &[]).await
    }

    /// [`Served::start`] with `env` added to the process environment (the
    /// `MCPGATE_*` overrides are removed unless `env` sets them).
    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> Served {
        let dir = TestDir::new();
        std::fs::write(dir.path("gw.toml"), config).unwrap();
        let log = std::fs::File::create(dir.path("gw.log")).unwrap();
        let mut cmd = Command::new(MCPGATE);
        cmd.args(["serve", "--config"])
            .arg(dir.path("gw.toml"))
            .env("FAKE_STDIO", fake_stdio())
            .env("TEST_DIR", &dir.0)
            .env("MCPGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env_remove("MCPGATE_LISTEN")
            .env_remove("MCPGATE_METRICS_LISTEN")
            .env_remove("MCPGATE_SESSION_KEYS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut served = Served {
            child: cmd.spawn().unwrap(),
            url: String::new(),
            base: String::new(),
            dir,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Some(addr) = served.logged("mcpgate listening", "addr") {
                served.base = format!("http://{addr}");
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

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).unwrap();
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("gw.log")).unwrap_or_default()
    }

    /// Field `field` of the first log line whose message is `message`.
    pub fn logged(&self, message: &str, field: &str) -> Option<String> {
        self.log()
            .lines()
            .find_map(|l| match serde_json::from_str::<Value>(l) {
                Ok(v) => (v["fields"]["message"] == message)
                    .then(|| v["fields"][field].as_str().map(str::to_owned))?,
                // `MCPGATE_LOG_FORMAT=text`: `… message field=value …`.
                Err(_) => {
                    let rest = l.split_once(&format!(" {message} "))?.1;
                    let value = rest.split_once(&format!("{field}="))?.1;
                    let value = value.split_whitespace().next()?;
                    Some(value.trim_matches('"').to_owned())
                }
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

    /// Replaces `gw.toml` with `config` (by rename, so the file watcher never
    /// reads half of it), sends SIGHUP and waits until a reload that started
    /// after the change ended (`configuration applied`, or the refusal).
    pub async fn reload(&self, config: &str) {
        let mark = self.log().lines().count();
        let next = self.dir.path("gw.toml.next");
        std::fs::write(&next, config).unwrap();
        std::fs::rename(&next, self.dir.path("gw.toml")).unwrap();
        self.signal(Signal::SIGHUP);
        let end = Instant::now() + Duration::from_secs(15);
        while Instant::now() < end {
            let messages: Vec<String> = self
                .log()
                .lines()
                .skip(mark)
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| v["fields"]["message"].as_str().map(str::to_owned))
                .collect();
            let started = messages.iter().position(|m| m == "reloading configuration");
            if let Some(i) = started
                && messages[i..].iter().any(|m| {
                    m == "configuration applied" || m.starts_with("configuration reload refused")
                })
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the reload did not finish:\n{}", self.log());
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

    /// Stops the process with `signal` and waits (up to 10 s) until it exited.
    pub async fn stop(mut self, signal: Signal) {
        self.signal(signal);
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
