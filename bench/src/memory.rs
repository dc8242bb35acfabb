//! Memory scenarios: `idle_sessions` (RSS per idle session, and whether it comes
//! back after expiry) and `sse_streams` (RSS per open GET stream, CPU while held).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::BodyExt;
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::client::{Endpoint, HttpConn, request_body};
use crate::suite::{Env, Gateway, http_backend_toml, round1, round3};

/// Connections used to open sessions in parallel.
const OPENERS: usize = 8;

async fn memory_gateway(
    env: &Env,
    name: &str,
    server_extra: &str,
) -> anyhow::Result<(crate::procs::Proc, Gateway)> {
    let (backend, base) = env.http_backend(&format!("backend-{name}"), 0).await?;
    let backends = format!(
        "{}{}",
        http_backend_toml("h", &format!("{base}/mcp")),
        env.stdio_backend_toml("s")
    );
    let gw = env.gateway(name, server_extra, &backends, 4).await?;
    Ok((backend, gw))
}

/// Opens `n` sessions (initialize + initialized) over a few connections.
async fn open_sessions(url: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let endpoint = Endpoint::parse(url)?;
    let mut tasks = Vec::new();
    for k in 0..OPENERS {
        let endpoint = endpoint.clone();
        let share = n / OPENERS + usize::from(k < n % OPENERS);
        tasks.push(tokio::spawn(async move {
            let mut conn = HttpConn::connect(&endpoint).await?;
            let mut ids = Vec::with_capacity(share);
            for _ in 0..share {
                ids.push(conn.open_session().await?.context("no Mcp-Session-Id")?);
            }
            Ok::<_, anyhow::Error>(ids)
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

async fn delete_sessions(url: &str, ids: &[String]) -> anyhow::Result<()> {
    let mut conn = HttpConn::connect(&Endpoint::parse(url)?).await?;
    for id in ids {
        conn.delete(id).await;
    }
    Ok(())
}

/// HTTP status of a `ping` in session `id` (404 once it expired).
async fn ping_status(url: &str, id: &str) -> anyhow::Result<StatusCode> {
    let mut conn = HttpConn::connect(&Endpoint::parse(url)?).await?;
    Ok(conn
        .post(Some(id), request_body(1, "ping", "{}"))
        .await?
        .status)
}

/// `idle_sessions`: RSS before and after opening N idle sessions, and after they
/// expired (memory returns).
pub async fn idle_sessions(env: &Env) -> anyhow::Result<Value> {
    let timeout = env.sizes.idle_timeout;
    let server = format!("session_idle_timeout = \"{}ms\"\n", timeout.as_millis());
    let (_backend, gw) = memory_gateway(env, "gateway-idle", &server).await?;
    // Warm the allocator and the runtime with a first batch, so the baseline is
    // a gateway that has served sessions, not a freshly started one.
    let warm = open_sessions(&gw.url, 200.min(env.sizes.idle_sessions)).await?;
    delete_sessions(&gw.url, &warm).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = gw.proc.rss_kib();
    let n = env.sizes.idle_sessions;
    let t = Instant::now();
    let ids = open_sessions(&gw.url, n).await?;
    let open_s = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opened = gw.proc.rss_kib();
    // The reaper runs every timeout/4 (at least 100 ms); give it a full extra period.
    let reap = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let wait = timeout.saturating_sub(t.elapsed()) + 2 * reap + Duration::from_millis(700);
    tokio::time::sleep(wait).await;
    let first = ping_status(&gw.url, &ids[0]).await?;
    let last = ping_status(&gw.url, &ids[ids.len() - 1]).await?;
    if first != StatusCode::NOT_FOUND || last != StatusCode::NOT_FOUND {
        bail!("sessions did not expire: ping answered {first} / {last}");
    }
    // Allocators hand freed pages back to the OS over a short decay period, not
    // at once: sample RSS each second (up to `idle_settle`) and stop once it is
    // back within 10% of the baseline.
    let expired_at = Instant::now();
    let mut expired = gw.proc.rss_kib();
    let mut samples = vec![expired];
    while expired as f64 > baseline as f64 * 1.10 && expired_at.elapsed() < env.sizes.idle_settle {
        tokio::time::sleep(Duration::from_secs(1)).await;
        expired = gw.proc.rss_kib();
        samples.push(expired);
    }
    let settle_s = expired_at.elapsed().as_secs_f64();
    let per_session = (opened.saturating_sub(baseline)) as f64 / n as f64;
    let back_pct = (expired as f64 - baseline as f64) / baseline.max(1) as f64 * 100.0;
    let e = json!({
        "sessions": n,
        "sessions_per_s": round1(n as f64 / open_s),
        "baseline_rss_kib": baseline,
        "open_rss_kib": opened,
        "expired_rss_kib": expired,
        "idle_session_kib": round3(per_session),
        "after_expiry_vs_baseline_pct": round1(back_pct),
        "after_expiry_rss_samples_kib": samples,
        "after_expiry_wait_s": round1(settle_s),
        "memory_returned": back_pct <= 10.0,
    });
    eprintln!("idle_sessions: {e}");
    Ok(e)
}

/// `sse_streams`: N sessions each holding its standalone GET stream open; RSS per
/// stream and the gateway's CPU while they are held.
pub async fn sse_streams(env: &Env) -> anyhow::Result<Value> {
    let (_backend, gw) = memory_gateway(env, "gateway-sse", "").await?;
    let n = env.sizes.sse_streams;
    let ids = open_sessions(&gw.url, n).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = gw.proc.rss_kib();
    let endpoint = Endpoint::parse(&gw.url)?;
    let gate = Arc::new(Semaphore::new(64));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<anyhow::Result<()>>(n);
    let mut holders = Vec::with_capacity(n);
    for id in ids {
        let (endpoint, gate, ready) = (endpoint.clone(), gate.clone(), ready_tx.clone());
        holders.push(tokio::spawn(async move {
            let opened = async {
                let _permit = gate.acquire().await?;
                let mut conn = HttpConn::connect(&endpoint).await?;
                let resp = conn.get_stream(&id).await?;
                Ok::<_, anyhow::Error>((conn, resp))
            }
            .await;
            let (_conn, resp) = match opened {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready.send(Err(e)).await;
                    return 0u64;
                }
            };
            let _ = ready.send(Ok(())).await;
            drop(ready);
            let mut body = resp.into_body();
            let mut bytes = 0u64;
            while let Some(Ok(frame)) = body.frame().await {
                bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            bytes
        }));
    }
    drop(ready_tx);
    let mut open = 0;
    let mut first_error = None;
    for _ in 0..n {
        let Some(r) = ready_rx.recv().await else {
            break;
        };
        match r {
            Ok(()) => open += 1,
            Err(e) => {
                first_error.get_or_insert(format!("{e:#}"));
            }
        }
    }
    if open < n {
        bail!(
            "only {open} of {n} GET streams opened: {}",
            first_error.unwrap_or_default()
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_streams = gw.proc.rss_kib();
    let cpu0 = gw.proc.cpu_us();
    tokio::time::sleep(env.sizes.sse_hold).await;
    let cpu_us = gw.proc.cpu_us().saturating_sub(cpu0);
    let held = gw.proc.rss_kib();
    let alive = holders.iter().filter(|h| !h.is_finished()).count();
    for h in &holders {
        h.abort();
    }
    let per_stream = (with_streams.saturating_sub(before)) as f64 / n as f64;
    let e = json!({
        "streams": n,
        "streams_alive_at_end": alive,
        "hold_s": env.sizes.sse_hold.as_secs_f64(),
        "sessions_rss_kib": before,
        "streams_rss_kib": with_streams,
        "end_rss_kib": held,
        "sse_stream_kib": round3(per_stream),
        "hold_cpu_ms": round1(cpu_us as f64 / 1000.0),
        "cpu_pct_of_one_core": round3(cpu_us as f64 / env.sizes.sse_hold.as_micros() as f64 * 100.0),
    });
    eprintln!("sse_streams: {e}");
    Ok(e)
}
