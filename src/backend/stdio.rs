//! stdio transport: a child process speaking newline-delimited JSON-RPC
//! (MCP 2025-11-25 basic/transports, stdio).
//!
//! The child runs in its own process group so that stopping it reaches the whole
//! tree (a shell wrapper and what it started). Stop order follows MCP basic/lifecycle
//! shutdown: close stdin, wait, SIGTERM, wait, SIGKILL. stderr is always drained into
//! the log so a chatty child never blocks.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::BackendError;
use super::conn::Connection;
use super::inbound::dispatch_text;

/// Longest line accepted from a child's stdout (a single JSON-RPC message).
const MAX_LINE: usize = 64 * 1024 * 1024;
/// Longest stderr line logged; the rest of the line is dropped.
const MAX_STDERR_LINE: usize = 4096;
/// How long a child gets after stdin is closed, and again after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The writing half and process handle of a stdio backend.
pub(crate) struct StdioLink {
    tx: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    pgid: Option<i32>,
    exited: CancellationToken,
}

impl StdioLink {
    /// Spawns the child and the tasks that feed and read it.
    ///
    /// Errors: [`BackendError::Unavailable`] when the command cannot be started.
    pub(crate) fn spawn(
        conn: &Arc<Connection>,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&Path>,
    ) -> Result<StdioLink, BackendError> {
        let mut cmd = Command::new(command);
        cmd.args(args)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        kill_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            BackendError::closed(&conn.backend, format!("cannot start {command:?}: {e}"))
        })?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(BackendError::closed(&conn.backend, "child has no pipes"));
        };
        tracing::info!(backend = %conn.backend, pid = ?pgid, command, "started stdio backend");
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(write_loop(stdin, rx));
        let reader = tokio::spawn(read_loop(conn.downgrade(), stdout));
        tokio::spawn(log_stderr(conn.backend.clone(), BufReader::new(stderr)));
        let exited = CancellationToken::new();
        tokio::spawn(watch_exit(conn.downgrade(), child, reader, exited.clone()));
        Ok(StdioLink {
            tx: Mutex::new(Some(tx)),
            pgid,
            exited,
        })
    }

    fn sender(&self) -> Option<mpsc::Sender<Vec<u8>>> {
        self.tx.lock().ok()?.clone()
    }

    /// Queues one message for the child's stdin.
    pub(crate) async fn send(&self, backend: &str, bytes: Vec<u8>) -> Result<(), BackendError> {
        let tx = self
            .sender()
            .ok_or_else(|| BackendError::closed(backend, "stdin closed"))?;
        tx.send(bytes)
            .await
            .map_err(|_| BackendError::closed(backend, "process exited"))
    }

    /// Queues a message without waiting; if the queue is full, a task waits for room.
    pub(crate) fn send_detached(&self, bytes: Vec<u8>) {
        let Some(tx) = self.sender() else { return };
        if let Err(mpsc::error::TrySendError::Full(bytes)) = tx.try_send(bytes) {
            tokio::spawn(async move {
                let _ = tx.send(bytes).await;
            });
        }
    }

    /// Stops the child: close stdin → wait → SIGTERM to its process group → wait →
    /// SIGKILL. Returns once it has exited (or was killed).
    pub(crate) async fn close(&self, backend: &str) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if tokio::time::timeout(STOP_GRACE, self.exited.cancelled())
            .await
            .is_ok()
        {
            return;
        }
        if let Some(pgid) = self.pgid {
            tracing::info!(
                backend,
                pgid,
                "stdio backend still running after stdin closed; SIGTERM"
            );
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
            if tokio::time::timeout(STOP_GRACE, self.exited.cancelled())
                .await
                .is_ok()
            {
                return;
            }
            tracing::warn!(backend, pgid, "stdio backend ignored SIGTERM; SIGKILL");
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            let _ = tokio::time::timeout(STOP_GRACE, self.exited.cancelled()).await;
        }
    }
}

impl Connection {
    /// The process id of a stdio connection's child (its process group), which
    /// names the process that holds what the backend keeps in memory (its
    /// tasks); `None` for other transports or before the child started.
    pub fn stdio_process(&self) -> Option<i32> {
        match self.link.get()? {
            super::Link::Stdio(s) => s.pgid,
            _ => None,
        }
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        if !self.exited.is_cancelled()
            && let Some(pgid) = self.pgid
        {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

/// Asks the kernel to SIGKILL the child when the gateway dies, so a child never
/// outlives a crashed or SIGKILLed gateway (an orphaned child would keep its
/// backend's state and resources with nobody to serve). (The signal follows the death
/// of the spawning thread; tokio's worker threads live as long as the runtime.)
#[allow(unsafe_code)]
fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec. It only makes
    // the prctl(2) system call, which is async-signal-safe, and does not allocate.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

async fn write_loop(mut stdin: ChildStdin, mut rx: mpsc::Receiver<Vec<u8>>) {
    // Everything already queued goes out in one write: one syscall and one
    // wake-up of the child per batch, instead of two writes per message (the
    // message, then its newline).
    let mut batch = Vec::with_capacity(16 * 1024);
    while let Some(first) = rx.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        batch.push(b'\n');
        while batch.len() < 1024 * 1024 {
            let Ok(bytes) = rx.try_recv() else { break };
            batch.extend_from_slice(&bytes);
            batch.push(b'\n');
        }
        if stdin.write_all(&batch).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
        if batch.capacity() > 1024 * 1024 {
            batch = Vec::with_capacity(16 * 1024);
        }
    }
}

async fn read_loop(conn: std::sync::Weak<Connection>, out: tokio::process::ChildStdout) {
    let mut lines = Lines::new(out, MAX_LINE);
    loop {
        match lines.next().await {
            Ok(Some(Some(line))) => {
                let Some(conn) = conn.upgrade() else { return };
                dispatch_text(&conn, &line, None);
            }
            Ok(Some(None)) => {
                if let Some(conn) = conn.upgrade() {
                    tracing::warn!(backend = %conn.backend, limit = MAX_LINE, "backend wrote an over-long line on stdout; skipped");
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Newline-delimited messages read straight into one growing buffer (no copy
/// through a `BufReader`): each line is split off as shared [`Bytes`], so a
/// response's result reaches the host without being copied
/// (`jsonrpc::RawJson`).
struct Lines<R> {
    r: R,
    buf: BytesMut,
    /// Bytes at the start of `buf` known to hold no `\n`.
    scanned: usize,
    /// Inside a line longer than `max`: dropped up to its `\n`.
    skipping: bool,
    max: usize,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    /// Bytes read at least per read (a pipe holds 64 KiB).
    const CHUNK: usize = 64 * 1024;

    fn new(r: R, max: usize) -> Self {
        Lines {
            r,
            buf: BytesMut::new(),
            scanned: 0,
            skipping: false,
            max,
        }
    }

    /// The next line without its `\n` (`Some(Some)`), an over-long line
    /// skipped (`Some(None)`), or the end (`None`; a last line without `\n`
    /// counts as a line).
    ///
    /// Errors: the read failed.
    async fn next(&mut self) -> std::io::Result<Option<Option<Bytes>>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let mut line = self.buf.split_to(self.scanned + i + 1);
                line.truncate(self.scanned + i);
                self.scanned = 0;
                if std::mem::take(&mut self.skipping) {
                    return Ok(Some(None));
                }
                return Ok(Some(Some(line.freeze())));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > self.max {
                self.skipping = true;
                self.buf.clear();
                self.scanned = 0;
            }
            if self.buf.capacity() - self.buf.len() < Self::CHUNK / 4 {
                // Doubling: a long line is copied O(1) times as it grows.
                self.buf.reserve(Self::CHUNK.max(self.buf.len()));
            }
            if self.r.read_buf(&mut self.buf).await? == 0 {
                let rest = std::mem::take(&mut self.buf);
                self.scanned = 0;
                return Ok(match std::mem::take(&mut self.skipping) {
                    true => Some(None),
                    false if rest.is_empty() => None,
                    false => Some(Some(rest.freeze())),
                });
            }
        }
    }
}

enum Line {
    Full,
    TooLong,
    Eof,
}

/// Reads up to and excluding the next `\n`; a longer line than `max` is consumed
/// and reported as [`Line::TooLong`].
async fn read_line_limited<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if out.is_empty() && !too_long {
                Line::Eof
            } else if too_long {
                Line::TooLong
            } else {
                Line::Full
            });
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long && out.len() + chunk.len() <= max {
            out.extend_from_slice(chunk);
        } else {
            too_long = true;
            out.clear();
        }
        let used = done.unwrap_or(buf.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Full });
        }
    }
}

async fn log_stderr(backend: Arc<str>, mut err: BufReader<tokio::process::ChildStderr>) {
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line_limited(&mut err, &mut line, MAX_STDERR_LINE).await {
            Ok(Line::Eof) | Err(_) => return,
            Ok(Line::Full) => {
                let text = String::from_utf8_lossy(&line);
                tracing::info!(backend = %backend, "stderr: {}", text.trim_end());
            }
            Ok(Line::TooLong) => {
                tracing::info!(backend = %backend, "stderr: (line longer than {MAX_STDERR_LINE} bytes dropped)");
            }
        }
    }
}

/// Reaps the child (no zombies), lets the reader drain what it wrote, then fails
/// whatever is still waiting on this connection. A child that closes its stdout but
/// keeps running can no longer answer, so it is killed.
async fn watch_exit(
    conn: std::sync::Weak<Connection>,
    mut child: Child,
    mut reader: tokio::task::JoinHandle<()>,
    exited: CancellationToken,
) {
    let status = tokio::select! {
        status = child.wait() => {
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut reader).await;
            status
        }
        _ = &mut reader => {
            match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            }
        }
    };
    exited.cancel();
    let why = match &status {
        Ok(s) => format!("process exited ({s})"),
        Err(e) => format!("process lost: {e}"),
    };
    if let Some(conn) = conn.upgrade() {
        if conn.is_closing() {
            tracing::debug!(backend = %conn.backend, cause = %why, "stdio backend stopped");
        } else if conn.is_alive() {
            tracing::warn!(backend = %conn.backend, cause = %why, "stdio backend stopped unexpectedly");
        }
        conn.fail_all(&why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn limits_line_length() {
        let data = b"short\nthis line is too long\nok\nlast".to_vec();
        let mut r = BufReader::with_capacity(4, &data[..]);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        loop {
            out.clear();
            match read_line_limited(&mut r, &mut out, 8).await.unwrap() {
                Line::Eof => break,
                Line::Full => seen.push(String::from_utf8(out.clone()).unwrap()),
                Line::TooLong => seen.push("<long>".into()),
            }
        }
        assert_eq!(seen, ["short", "<long>", "ok", "last"]);
    }

    /// Stdout lines, read a few bytes at a time: split at each `\n`, an
    /// over-long one skipped whole, a last line without `\n` kept.
    #[tokio::test]
    async fn splits_stdout_lines_and_skips_long_ones() {
        let data = b"short\nthis line is too long\n\nok\nlast".to_vec();
        let (mut w, r) = tokio::io::duplex(3);
        tokio::spawn(async move { w.write_all(&data).await });
        let mut lines = Lines::new(r, 8);
        let mut seen = Vec::new();
        while let Some(line) = lines.next().await.unwrap() {
            seen.push(line.map_or("<long>".into(), |l| String::from_utf8(l.to_vec()).unwrap()));
        }
        assert_eq!(seen, ["short", "<long>", "", "ok", "last"]);
    }
}
