//! Child processes of a benchmark run and what `/proc` says about them: resident
//! memory and CPU time (utime + stime, the steadiest figure on a shared machine).

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Proc {
    child: Child,
    /// Process id.
    pub pid: u32,
    /// Name for messages.
    pub name: String,
}

impl Proc {
    /// Starts `program args`, stderr (and stdout) to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[&str], log: &Path) -> anyhow::Result<Proc> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Proc {
            pid: child.id(),
            child,
            name: name.to_owned(),
        })
    }

    /// Starts a shell command line (`exec`ed, so the pid is the program's).
    pub fn spawn_shell(name: &str, line: &str, log: &Path) -> anyhow::Result<Proc> {
        let exec = format!("exec {line}");
        Proc::spawn(name, Path::new("/bin/sh"), &["-c", &exec], log)
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// CPU time used so far (all threads), µs.
    pub fn cpu_us(&self) -> u64 {
        cpu_us(self.pid)
    }

    /// Resident set size, KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid)
    }

    /// Sends SIGTERM and waits up to `limit` for the process to exit (SIGKILL and
    /// an error beyond it). For a process that must finish its own shutdown, such
    /// as a gateway under valgrind writing its profile on exit.
    pub async fn terminate(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{} did not exit within {limit:?} of SIGTERM", self.name);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return; // already exited (and reaped): its pid may be someone else's now
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
        for _ in 0..100 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second of `/proc/PID/stat` times.
pub fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// utime + stime of `pid`, µs (0 if unknown).
pub fn cpu_us(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name (which may contain spaces) start at field 3.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
        .sum();
    ticks * 1_000_000 / clock_ticks()
}

/// VmRSS of `pid`, KiB (0 if unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until `127.0.0.1:port` accepts connections.
pub async fn wait_port(proc: &mut Proc, port: u16, limit: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if !proc.running() {
            bail!("{} exited before listening on port {port}", proc.name);
        }
        if Instant::now() > until {
            bail!(
                "{} does not listen on port {port} after {limit:?}",
                proc.name
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
