//! `mcpgate-bench`: the gateway benchmark (bench/README.md).
//!
//! - `backend`: the fast benchmark MCP server (stdio, or Streamable HTTP with `--http`).
//! - `load`: the load generator against one endpoint (closed-loop or `--rate`).
//! - `suite`: every scenario, direct and through mcpgate in alternation, written to
//!   `latest.json` and `latest.md` (what `scripts/bench.sh` runs).
//! - `instructions`: instructions per call of the gateway under callgrind, merged
//!   into the same files (`scripts/bench.sh --instructions`).

mod backend;
mod client;
mod cluster;
mod instructions;
mod load;
mod memory;
mod procs;
mod report;
mod suite;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::{Map, Value, json};

#[derive(Parser)]
#[command(about = "mcpgate's benchmark: load generator, echo backend and scenario runner")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the benchmark backend (stdio unless --http).
    Backend {
        /// Serve Streamable HTTP on this address.
        #[arg(long)]
        http: Option<SocketAddr>,
        /// Serve stdio (the default).
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Answer HTTP requests with SSE streams instead of JSON bodies.
        #[arg(long)]
        sse: bool,
        /// Filler tools listed besides echo and payload.
        #[arg(long, default_value_t = 0)]
        extra_tools: usize,
    },
    /// Load one endpoint and print calls/s and latency quantiles.
    Load {
        /// Streamable HTTP endpoint (http://host:port/path).
        #[arg(long, conflicts_with = "stdio")]
        url: Option<String>,
        /// Drive a stdio server instead: command and arguments.
        #[arg(long, num_args = 1.., allow_hyphen_values = true)]
        stdio: Vec<String>,
        /// JSON-RPC method: tools/call, tools/list, resources/read, ...
        #[arg(long, default_value = "tools/call")]
        method: String,
        /// Tool to call (tools/call).
        #[arg(long, default_value = "echo")]
        tool: String,
        /// Tool arguments (JSON).
        #[arg(long, default_value = r#"{"message":"hello"}"#)]
        arguments: String,
        /// URI to read (resources/read).
        #[arg(long, default_value = "bench://static")]
        uri: String,
        /// Concurrent workers (C).
        #[arg(short, long, default_value_t = 1)]
        concurrency: usize,
        /// Host sessions (S; default = C).
        #[arg(short, long)]
        sessions: Option<usize>,
        /// Seconds to run.
        #[arg(short, long, default_value_t = 5.0)]
        duration: f64,
        /// Stop after this many calls.
        #[arg(long)]
        count: Option<u64>,
        /// Fixed rate in calls/s (coordinated-omission aware); closed-loop without.
        #[arg(long)]
        rate: Option<f64>,
        /// Seconds of warm-up (not measured).
        #[arg(long, default_value_t = 0.5)]
        warmup: f64,
    },
    /// Run every scenario and write the results.
    Suite {
        /// The mcpgate binary.
        #[arg(long)]
        gateway: PathBuf,
        /// Results directory.
        #[arg(long, default_value = "bench/results")]
        out: PathBuf,
        /// Base name of the result files.
        #[arg(long, default_value = "latest")]
        name: String,
        /// Tiny durations; only checks that every key is produced.
        #[arg(long)]
        smoke: bool,
        /// Comma-separated scenarios to run (default: all).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// A peer for stdio_echo: NAME=COMMAND with {port} and {backend}.
        #[arg(long)]
        peer: Vec<String>,
        /// A peer's version for the report: NAME=VERSION.
        #[arg(long)]
        peer_version: Vec<String>,
    },
    /// Count the gateway's instructions per call under callgrind and merge the
    /// figures into the results files.
    Instructions {
        /// The mcpgate binary.
        #[arg(long)]
        gateway: PathBuf,
        /// Results directory.
        #[arg(long, default_value = "bench/results")]
        out: PathBuf,
        /// Base name of the result files to merge into.
        #[arg(long, default_value = "latest")]
        name: String,
        /// Where the callgrind profiles and top-symbol summaries go (default
        /// OUT/callgrind, or the scratch directory with --smoke).
        #[arg(long)]
        profiles: Option<PathBuf>,
        /// The smaller call count (default 2000; 20 with --smoke).
        #[arg(long)]
        n1: Option<u64>,
        /// The larger call count (default 6000; 60 with --smoke).
        #[arg(long)]
        n2: Option<u64>,
        /// Count each scenario this many times (the figure is the mean).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Tokio worker threads of the counted gateway (1: steadiest; see
        /// bench/README.md).
        #[arg(long, default_value_t = instructions::DEFAULT_WORKERS)]
        workers: usize,
        /// Tiny counts and only stdio_echo_c1 unless --only: checks the path works.
        #[arg(long)]
        smoke: bool,
        /// Comma-separated scenario keys (stdio_echo_c1, stdio_echo_c16,
        /// http_echo_c1, http_echo_c16, tools_list_cached).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Backend {
        http: None,
        extra_tools,
        ..
    } = &cli.command
    {
        let server = backend::Server::new(*extra_tools, false);
        return match backend::run_stdio(&server) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mcpgate-bench backend: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcpgate-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcpgate-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Backend {
            http,
            sse,
            extra_tools,
            ..
        } => {
            let addr = http.context("--http")?;
            backend::run_http(Arc::new(backend::Server::new(extra_tools, sse)), addr).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Load {
            url,
            stdio,
            method,
            tool,
            arguments,
            uri,
            concurrency,
            sessions,
            duration,
            count,
            rate,
            warmup,
        } => {
            let call = match method.as_str() {
                "tools/call" => load::Call::tool(&tool, &arguments),
                "resources/read" => load::Call {
                    method,
                    params: format!(r#"{{"uri":"{uri}"}}"#),
                },
                _ => load::Call {
                    method,
                    params: "{}".into(),
                },
            };
            let workers = match (&url, stdio.split_first()) {
                (Some(url), _) => {
                    load::http_workers(url, concurrency, sessions.unwrap_or(concurrency)).await?
                }
                (None, Some((cmd, args))) => {
                    let c = client::StdioClient::spawn(cmd, args).await?;
                    (0..concurrency)
                        .map(|_| load::Worker::Stdio(c.clone()))
                        .collect()
                }
                (None, None) => bail!("give --url or --stdio"),
            };
            let warm = load::Spec {
                duration: Duration::from_secs_f64(warmup),
                count: None,
                rate,
            };
            let (workers, _) = load::run(workers, &call, &warm).await;
            let spec = load::Spec {
                duration: Duration::from_secs_f64(duration),
                count,
                ..warm
            };
            let (mut workers, o) = load::run(workers, &call, &spec).await;
            load::close_http_workers(&mut workers).await;
            let out = json!({
                "calls": o.calls, "errors": o.errors, "first_error": o.first_error,
                "elapsed_s": suite::round3(o.elapsed.as_secs_f64()), "rps": suite::round1(o.rps()),
                "p50_us": o.quantile_us(0.5), "p90_us": o.quantile_us(0.9),
                "p99_us": o.quantile_us(0.99), "max_us": o.hist.max(),
            });
            println!("{out}");
            Ok(if o.errors == 0 && o.calls > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Suite {
            gateway,
            out,
            name,
            smoke,
            only,
            peer,
            peer_version,
        } => suite_main(gateway, out, &name, smoke, &only, &peer, &peer_version).await,
        Cmd::Instructions {
            gateway,
            out,
            name,
            profiles,
            n1,
            n2,
            repeat,
            workers,
            smoke,
            only,
        } => {
            let only = if smoke && only.is_empty() {
                vec!["stdio_echo_c1".to_owned()]
            } else {
                only
            };
            let opts = instructions::Options {
                n1: n1.unwrap_or(if smoke { 20 } else { 2000 }),
                n2: n2.unwrap_or(if smoke { 60 } else { 6000 }),
                repeat: repeat.max(1),
                workers: workers.max(1),
                profiles: profiles.unwrap_or_else(|| {
                    if smoke {
                        suite::scratch_dir(&out).join("callgrind")
                    } else {
                        out.join("callgrind")
                    }
                }),
                only,
            };
            instructions_main(gateway, &out, &name, &opts).await
        }
    }
}

/// Runs the instruction step and merges its figures into `OUT/NAME.{json,md}`
/// (other keys kept).
async fn instructions_main(
    gateway: PathBuf,
    out: &std::path::Path,
    name: &str,
    opts: &instructions::Options,
) -> anyhow::Result<ExitCode> {
    let env = scratch_env(&gateway, out, suite::Sizes::smoke())?;
    let (detail, figures) = instructions::run(&env, opts).await?;
    let wanted: Vec<String> = instructions::keys()
        .into_iter()
        .filter(|k| {
            opts.only.is_empty()
                || opts
                    .only
                    .iter()
                    .any(|o| k.strip_prefix("instructions_per_call_") == Some(o))
        })
        .collect();
    let json_path = out.join(format!("{name}.json"));
    let mut doc: Value = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    let Some(m) = doc.as_object_mut() else {
        bail!("{} is not a JSON object", json_path.display());
    };
    // Figures of scenarios not run this time stay, with the details they came with.
    let mut merged = m
        .get("instructions")
        .and_then(|v| v["scenarios"].as_object().cloned())
        .unwrap_or_default();
    if let Some(new) = detail["scenarios"].as_object() {
        merged.extend(new.clone());
    }
    let mut detail = detail;
    detail["scenarios"] = Value::Object(merged);
    m.insert("instructions".into(), detail);
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|k| !figures.contains_key(*k))
        .collect();
    m.extend(figures);
    let md_path = out.join(format!("{name}.md"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    std::fs::write(&md_path, report::markdown(&doc))?;
    eprintln!(
        "merged into {} and {}",
        json_path.display(),
        md_path.display()
    );
    if !missing.is_empty() {
        eprintln!("missing keys: {missing:?}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The scenario environment: the gateway binary, this binary, the scratch directory.
fn scratch_env(
    gateway: &std::path::Path,
    out: &std::path::Path,
    sizes: suite::Sizes,
) -> anyhow::Result<suite::Env> {
    let tmp = suite::scratch_dir(out);
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    Ok(suite::Env {
        gateway: std::fs::canonicalize(gateway)
            .with_context(|| format!("gateway binary {}", gateway.display()))?,
        me: std::env::current_exe()?,
        tmp,
        sizes,
        peers: Vec::new(),
    })
}

/// The checked-out commit (12 hex digits), `-dirty` with uncommitted changes to
/// tracked files outside `bench/results` (the results are not the code measured).
pub fn commit() -> String {
    let commit = sh("git", &["rev-parse", "--short=12", "HEAD"]);
    let status = [
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)bench/results",
    ];
    let dirty = !sh("git", &status).is_empty();
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

fn split_kv(s: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .with_context(|| format!("expected NAME=VALUE: {s}"))?;
    Ok((k.to_owned(), v.to_owned()))
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_owned()));
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory": mem,
        "kernel": sh("uname", &["-sr"]),
        "rustc": sh("rustc", &["--version"]),
    })
}

#[allow(clippy::too_many_arguments)]
async fn suite_main(
    gateway: PathBuf,
    out: PathBuf,
    name: &str,
    smoke: bool,
    only: &[String],
    peers: &[String],
    peer_versions: &[String],
) -> anyhow::Result<ExitCode> {
    let sizes = if smoke {
        suite::Sizes::smoke()
    } else {
        suite::Sizes::full()
    };
    let mut env = scratch_env(&gateway, &out, sizes)?;
    env.peers = peers
        .iter()
        .map(|p| split_kv(p).map(|(name, command)| suite::Peer { name, command }))
        .collect::<anyhow::Result<_>>()?;
    let wanted = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let mut scenarios = Map::new();
    let mut errors = Vec::new();
    let mut fanout16 = Value::Null;
    if ["http_echo", "stdio_echo", "payload"]
        .iter()
        .any(|s| wanted(s))
        && let Err(e) = suite::throughput(&env, &wanted, &mut scenarios).await
    {
        errors.push(format!("throughput: {e:#}"));
    }
    if wanted("fanout_list") {
        match suite::fanout(&env, &mut scenarios).await {
            Ok(ms) => fanout16 = json!(ms),
            Err(e) => errors.push(format!("fanout_list: {e:#}")),
        }
    }
    if wanted("idle_sessions") {
        match memory::idle_sessions(&env).await {
            Ok(v) => {
                scenarios.insert("idle_sessions".into(), v);
            }
            Err(e) => errors.push(format!("idle_sessions: {e:#}")),
        }
    }
    if wanted("sse_streams") {
        match memory::sse_streams(&env).await {
            Ok(v) => {
                scenarios.insert("sse_streams".into(), v);
            }
            Err(e) => errors.push(format!("sse_streams: {e:#}")),
        }
    }
    let mut versions = Map::new();
    for v in peer_versions {
        let (k, v) = split_kv(v)?;
        versions.insert(k, json!(v));
    }
    let mut doc = json!({
        "date": sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
        "commit": commit(),
        "machine": machine(),
        "smoke": smoke,
        "idle_session_kib": scenarios.get("idle_sessions").map_or(Value::Null, |v| v["idle_session_kib"].clone()),
        "sse_stream_kib": scenarios.get("sse_streams").map_or(Value::Null, |v| v["sse_stream_kib"].clone()),
        "fanout16_cached_ms": fanout16,
        "scenarios": scenarios,
        "peer_versions": versions,
        "errors": errors,
    });
    doc["targets"] = report::targets(&doc);
    let json_path = out.join(format!("{name}.json"));
    let md_path = out.join(format!("{name}.md"));
    keep_instruction_figures(&json_path, &mut doc);
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    std::fs::write(&md_path, report::markdown(&doc))?;
    eprintln!("wrote {} and {}", json_path.display(), md_path.display());
    for e in doc["errors"].as_array().into_iter().flatten() {
        eprintln!("error: {}", e.as_str().unwrap_or_default());
    }
    if only.is_empty() && peers.is_empty() {
        let missing = report::missing_keys(&doc);
        if !missing.is_empty() {
            eprintln!("missing keys: {}", missing.join(", "));
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(if doc["errors"].as_array().is_some_and(Vec::is_empty) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Carries the instruction figures (`instructions`, `instructions_per_call_*`) of the
/// results file being replaced over into `doc`: they come from their own step
/// (`scripts/bench.sh --instructions`), which records its commit and date.
fn keep_instruction_figures(path: &std::path::Path, doc: &mut Value) {
    let Some(old) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    else {
        return;
    };
    let (Some(old), Some(new)) = (old.as_object(), doc.as_object_mut()) else {
        return;
    };
    for (k, v) in old {
        if k.starts_with("instructions") && !new.contains_key(k) {
            new.insert(k.clone(), v.clone());
        }
    }
}
