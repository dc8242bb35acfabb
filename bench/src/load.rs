//! The load loop: C workers issuing one kind of request, closed-loop or at a
//! fixed rate, with latencies in an HDR histogram (microseconds).
//!
//! At a fixed rate each request has an intended start time on a schedule
//! (`rate` requests/s over all workers); latency is measured from that intended
//! time, not from when the worker got round to it, so a stall is charged to
//! every request it delayed (coordinated omission, as in wrk2).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::bail;
use bytes::Bytes;
use hdrhistogram::Histogram;
use hyper::StatusCode;
use tokio::time::Instant;

use crate::client::{Endpoint, HttpConn, StdioClient, is_result, request_body};

/// A request to repeat: JSON-RPC method and params.
#[derive(Debug, Clone)]
pub struct Call {
    /// e.g. `tools/call`.
    pub method: String,
    /// JSON text of the params.
    pub params: String,
}

impl Call {
    /// `tools/call` of `tool` with `arguments` (JSON text).
    pub fn tool(tool: &str, arguments: &str) -> Call {
        Call {
            method: "tools/call".into(),
            params: format!(r#"{{"name":"{tool}","arguments":{arguments}}}"#),
        }
    }
}

/// How long and how hard to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Stop after this long...
    pub duration: Duration,
    /// ...or after this many calls, whichever comes first.
    pub count: Option<u64>,
    /// Fixed rate (calls/s over all workers); closed-loop when `None`.
    pub rate: Option<f64>,
}

/// What one run measured.
pub struct Outcome {
    /// Calls that got a result.
    pub calls: u64,
    /// Calls that failed (transport, HTTP status or JSON-RPC error).
    pub errors: u64,
    /// The first error seen.
    pub first_error: Option<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latencies of successful calls, µs.
    pub hist: Histogram<u64>,
}

/// An empty latency histogram (1 µs .. 10 min, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

impl Outcome {
    /// No calls yet.
    pub fn empty() -> Outcome {
        Outcome {
            calls: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            hist: histogram(),
        }
    }

    /// Adds another run (rounds of the same measurement).
    pub fn merge(&mut self, other: &Outcome) {
        self.calls += other.calls;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.elapsed += other.elapsed;
        let _ = self.hist.add(&other.hist);
    }

    /// Successful calls per second.
    pub fn rps(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency quantile in µs.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }
}

/// One worker's way of sending a request.
pub enum Worker {
    /// Its own HTTP connection, in a host session.
    Http {
        /// The connection.
        conn: HttpConn,
        /// The session id (`None` on a stateless server).
        session: Option<String>,
        /// Next JSON-RPC id.
        next_id: u64,
    },
    /// A share of a stdio pipe.
    Stdio(Arc<StdioClient>),
}

impl Worker {
    /// Sends `call` once; Ok with the response on a JSON-RPC result.
    pub async fn call(&mut self, call: &Call) -> anyhow::Result<Bytes> {
        match self {
            Worker::Http {
                conn,
                session,
                next_id,
            } => {
                *next_id += 1;
                let body = request_body(*next_id, &call.method, &call.params);
                let a = conn.post(session.as_deref(), body).await?;
                if a.status != StatusCode::OK {
                    bail!("HTTP {}", a.status);
                }
                if !is_result(&a.message) {
                    bail!(
                        "{}",
                        String::from_utf8_lossy(&a.message[..a.message.len().min(300)])
                    );
                }
                Ok(a.message)
            }
            Worker::Stdio(c) => {
                let m = c.call(&call.method, &call.params).await?;
                if !is_result(&m) {
                    bail!("{}", String::from_utf8_lossy(&m[..m.len().min(300)]));
                }
                Ok(m)
            }
        }
    }
}

/// `concurrency` HTTP workers on `sessions` host sessions (worker i uses session
/// i mod S; every worker has its own connection).
pub async fn http_workers(
    url: &str,
    concurrency: usize,
    sessions: usize,
) -> anyhow::Result<Vec<Worker>> {
    let endpoint = Endpoint::parse(url)?;
    let mut conns = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        conns.push(HttpConn::connect(&endpoint).await?);
    }
    let mut ids = Vec::with_capacity(sessions);
    for i in 0..sessions.max(1) {
        let n = conns.len();
        ids.push(conns[i % n].open_session().await?);
    }
    Ok(conns
        .into_iter()
        .enumerate()
        .map(|(i, conn)| Worker::Http {
            conn,
            session: ids[i % ids.len()].clone(),
            next_id: 0,
        })
        .collect())
}

/// Ends the workers' sessions (DELETE), once per session.
pub async fn close_http_workers(workers: &mut [Worker]) {
    let mut done = std::collections::HashSet::new();
    for w in workers {
        if let Worker::Http {
            conn,
            session: Some(s),
            ..
        } = w
            && done.insert(s.clone())
        {
            conn.delete(s).await;
        }
    }
}

/// Runs `call` on every worker per `spec`; the workers are handed back for the
/// next round.
pub async fn run(workers: Vec<Worker>, call: &Call, spec: &Spec) -> (Vec<Worker>, Outcome) {
    let n = workers.len();
    let budget = Arc::new(AtomicU64::new(spec.count.unwrap_or(u64::MAX)));
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut tasks = Vec::with_capacity(n);
    for (i, mut w) in workers.into_iter().enumerate() {
        let call = call.clone();
        let budget = budget.clone();
        // Fixed rate: worker i owns every n-th slot of the schedule, offset by i.
        let pace = spec.rate.map(|r| {
            let period = Duration::from_secs_f64(n as f64 / r);
            (start + Duration::from_secs_f64(i as f64 / r), period)
        });
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::empty();
            let mut k: u32 = 0;
            loop {
                let intended = match pace {
                    Some((first, period)) => {
                        let at = first + period * k;
                        k += 1;
                        tokio::time::sleep_until(at).await;
                        at
                    }
                    None => Instant::now(),
                };
                if intended >= deadline || !take_one(&budget) {
                    break;
                }
                let sent = Instant::now();
                let result = w.call(&call).await;
                let done = Instant::now();
                let from = if pace.is_some() { intended } else { sent };
                match result {
                    Ok(_) => {
                        out.calls += 1;
                        let us = done.duration_since(from).as_micros() as u64;
                        let _ = out.hist.record(us.max(1));
                    }
                    Err(e) => {
                        out.errors += 1;
                        if out.first_error.is_none() {
                            out.first_error = Some(format!("{e:#}"));
                        }
                    }
                }
            }
            (w, out)
        }));
    }
    let mut total = Outcome::empty();
    let mut back = Vec::with_capacity(n);
    for t in tasks {
        if let Ok((w, o)) = t.await {
            total.merge(&o);
            back.push(w);
        }
    }
    total.elapsed = start.elapsed();
    (back, total)
}

fn take_one(budget: &AtomicU64) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
        .is_ok()
}
