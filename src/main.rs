//! The `mcpgate` command line: `serve`, `check-config`, `config-schema` and `demo-server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcpgate::config::{Config, ConfigError};
use mcpgate::logging::{AccessFormat, FastFields};

mod demo;

/// jemalloc instead of the system allocator: malloc/free were a fifth of the
/// gateway's CPU per call under glibc (perf, http_echo and stdio_echo), and glibc
/// keeps the memory of expired sessions while jemalloc purges freed pages (at
/// once after a mass expiry: the runtime's park hook below, `mcpgate::memory`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// mcpgate: one MCP endpoint over many MCP servers.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Config file: TOML, or a JSON file in the `mcpServers` format. Default
        /// `config/mcpgate.toml`, or the same file compiled into the binary when the
        /// working directory has none.
        #[arg(long, short, env = "MCPGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Override `server.listen` (e.g. 127.0.0.1:8080).
        #[arg(long, env = "MCPGATE_LISTEN")]
        listen: Option<SocketAddr>,
    },
    /// Validate a config file and print every problem with its field path.
    CheckConfig {
        /// Config file to check; found as `serve` finds it (default
        /// `config/mcpgate.toml`, else the embedded default).
        #[arg(long, short, env = "MCPGATE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the JSON Schema of the TOML config file (config/mcpgate.schema.json).
    ConfigSchema,
    /// Print what a host is shown: the tools, prompts, resources and resource
    /// templates (each with the backend it routes to) and what the policy hides,
    /// for a principal with the given token claims, at one endpoint. Starts the configured
    /// backends (on a loopback port, no metrics listener), waits for their
    /// catalogues, prints, stops them.
    Catalog {
        /// Config file; found as `serve` finds it.
        #[arg(long, short, env = "MCPGATE_CONFIG")]
        config: Option<PathBuf>,
        /// The token's claims as JSON, e.g. '{"iss":"https://idp","sub":"alice",
        /// "scope":"mcp tools:read"}' (trusted as given: nothing is verified).
        /// Default: an unauthenticated host.
        #[arg(long, conflicts_with = "token")]
        claims: Option<String>,
        /// A bearer token (`-`: read it from stdin), verified against `[auth]` as
        /// a host's token is; its principal is described.
        #[arg(long)]
        token: Option<String>,
        /// The `[endpoints.NAME]` to describe (required when endpoints are configured).
        #[arg(long)]
        endpoint: Option<String>,
        /// Print the full JSON (every item as listed, plus "backend" and "hidden").
        #[arg(long)]
        json: bool,
        /// How long to wait for the backends' catalogues, in seconds.
        #[arg(long, default_value_t = 20)]
        wait: u64,
    },
    /// Run the built-in demo MCP server (stdio by default).
    DemoServer {
        /// Serve Streamable HTTP on this address instead of stdio (port 0 picks a
        /// free one); the endpoint URL is printed on stdout once listening.
        #[arg(long)]
        http: Option<SocketAddr>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A worker going idle flushes its jemalloc cache after a mass expiry.
        .on_thread_park(mcpgate::memory::on_park)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcpgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::DemoServer { http } => {
            init_logging();
            runtime
                .block_on(demo::run(http))
                .map_err(anyhow::Error::from)
        }
        Command::Serve { config, listen } => runtime.block_on(serve(config, listen)),
        Command::CheckConfig { config } => return check_config(config),
        Command::Catalog {
            config,
            claims,
            token,
            endpoint,
            json,
            wait,
        } => runtime.block_on(catalog(config, claims, token, endpoint, json, wait)),
        Command::ConfigSchema => {
            let schema = mcpgate::config::json_schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            return ExitCode::SUCCESS;
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout may be a protocol channel for `demo-server`).
/// `RUST_LOG` filters, default `info`; `MCPGATE_LOG_FORMAT=json` for JSON lines.
fn init_logging() {
    // The access line (one per request) is written by `AccessFormat`, and span
    // fields by `FastFields`: the same bytes for a fraction of the stock
    // formatter's cost.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_ansi(ansi())
        .with_writer(std::io::stderr);
    let format = tracing_subscriber::fmt::format();
    if json_logs() {
        builder
            .json()
            .event_format(AccessFormat::json(format.json()))
            .init();
    } else {
        builder
            .fmt_fields(FastFields::default())
            .event_format(AccessFormat::text(format))
            .init();
    }
}

fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

fn json_logs() -> bool {
    std::env::var("MCPGATE_LOG_FORMAT").is_ok_and(|f| f == "json")
}

/// Colours only on a terminal: escape codes in container logs are noise, and
/// formatting them costs CPU on every request span.
fn ansi() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The log output alone (no tracing).
fn log_subscriber() -> Box<dyn tracing::Subscriber + Send + Sync> {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_ansi(ansi())
        .with_writer(std::io::stderr);
    let format = tracing_subscriber::fmt::format();
    if json_logs() {
        Box::new(
            builder
                .json()
                .event_format(AccessFormat::json(format.json()))
                .finish(),
        )
    } else {
        Box::new(
            builder
                .fmt_fields(FastFields::default())
                .event_format(AccessFormat::text(format))
                .finish(),
        )
    }
}

/// The log output plus the OpenTelemetry layer of `pipeline`. The log filter
/// is the fmt layer's own and never shows the spans meant for tracing; the
/// tracing layer sees only those.
fn init_traced_logging(pipeline: &mcpgate::telemetry::Pipeline) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let off = format!("{}=off", mcpgate::telemetry::TARGET);
    let filter = match off.parse() {
        Ok(d) => log_filter().add_directive(d),
        Err(_) => log_filter(),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi())
        .with_writer(std::io::stderr);
    let format = tracing_subscriber::fmt::format();
    let fmt = if json_logs() {
        fmt.json()
            .event_format(AccessFormat::json(format.json()))
            .with_filter(filter)
            .boxed()
    } else {
        fmt.fmt_fields(FastFields::default())
            .event_format(AccessFormat::text(format))
            .with_filter(filter)
            .boxed()
    };
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(fmt)
        .with(pipeline.layer())
        .init();
}

/// The config file `serve` and `check-config` use: `--config`/`MCPGATE_CONFIG`,
/// else `config/mcpgate.toml` when the working directory has one, else `None`
/// (the embedded default).
fn config_path(given: Option<PathBuf>) -> Option<PathBuf> {
    let default = PathBuf::from("config/mcpgate.toml");
    given.or_else(|| default.exists().then_some(default))
}

async fn serve(path: Option<PathBuf>, listen: Option<SocketAddr>) -> anyhow::Result<()> {
    let path = config_path(path);
    // The config says whether traces are on, so it is read before the global
    // subscriber is installed, under a log-only one.
    let loaded = tracing::subscriber::with_default(log_subscriber(), || match &path {
        Some(p) => Config::load(p),
        None => {
            tracing::info!(
                "no config/mcpgate.toml here; serving the embedded default configuration"
            );
            Config::embedded_default()
        }
    });
    let mut config = loaded?;
    if let Some(addr) = listen {
        config.server.listen = addr;
    }
    let traces = mcpgate::telemetry::Pipeline::start(&config.telemetry)?;
    match &traces {
        Some(p) => {
            init_traced_logging(p);
            tracing::info!(endpoint = ?config.telemetry.traces_url(), ratio = config.telemetry.sampling_ratio, "exporting traces (OTLP/HTTP)");
        }
        None => init_logging(),
    }
    let gateway = Arc::new(
        mcpgate::Gateway::start(config)
            .await
            .context("starting the gateway")?,
    );
    let watcher = match path {
        Some(path) => tokio::spawn(watch_config(gateway.clone(), path, listen)),
        None => tokio::spawn(std::future::pending()),
    };
    shutdown_signal().await;
    watcher.abort();
    let _ = watcher.await;
    let Ok(gateway) = Arc::try_unwrap(gateway) else {
        anyhow::bail!("gateway still in use at shutdown");
    };
    tracing::info!("shutting down");
    gateway.shutdown().await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    Ok(())
}

/// `mcpgate catalog`: what a principal is shown (see the subcommand's help).
async fn catalog(
    path: Option<PathBuf>,
    claims: Option<String>,
    token: Option<String>,
    endpoint: Option<String>,
    json: bool,
    wait: u64,
) -> anyhow::Result<()> {
    let token = match token.as_deref() {
        Some("-") => {
            let mut t = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
                .context("reading the token from stdin")?;
            Some(t)
        }
        _ => token,
    };
    let claims = match claims {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(_) => anyhow::bail!("--claims must be a JSON object"),
            Err(e) => anyhow::bail!("--claims is not JSON: {e}"),
        },
    };
    let mut config = match config_path(path) {
        Some(p) => Config::load(&p)?,
        None => Config::embedded_default()?,
    };
    config.server.metrics_listen = None;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port")?;
    let gateway = mcpgate::Gateway::start_on(config, listener)
        .await
        .context("starting the backends")?;
    let wait = std::time::Duration::from_secs(wait);
    let seen = match &token {
        Some(t) => gateway.describe_token(t, endpoint.as_deref(), wait).await,
        None => gateway.describe(claims, endpoint.as_deref(), wait).await,
    };
    gateway.shutdown().await;
    let seen = seen.map_err(anyhow::Error::msg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&seen)?);
        return Ok(());
    }
    for (list, id) in [
        ("tools", "name"),
        ("prompts", "name"),
        ("resources", "uri"),
        ("resourceTemplates", "uriTemplate"),
    ] {
        let items = seen[list].as_array().map(Vec::as_slice).unwrap_or_default();
        println!("{list} ({}):", items.len());
        for item in items {
            let backend = item["backend"].as_str().unwrap_or("?");
            println!("  {}  <- {backend}", item[id].as_str().unwrap_or("?"));
        }
        let hidden = seen["hidden"][list]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !hidden.is_empty() {
            let names: Vec<&str> = hidden.iter().filter_map(|v| v.as_str()).collect();
            println!("  hidden by policy: {}", names.join(", "));
        }
    }
    Ok(())
}

/// Reloads the configuration on SIGHUP and when the file's content changes
/// (polled every 2 s, by content, so a Kubernetes ConfigMap's symlink swap is
/// seen). An invalid or empty new file is logged and the running configuration kept.
/// `listen` (`--listen`) overrides every file, as it did at start.
async fn watch_config(gateway: Arc<mcpgate::Gateway>, path: PathBuf, listen: Option<SocketAddr>) {
    use tokio::signal::unix::{SignalKind, signal};
    let fingerprint = |p: &std::path::Path| std::fs::read(p).ok().map(|b| sha_of(&b));
    let mut last = fingerprint(&path);
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    loop {
        let why = tokio::select! {
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                // What SIGHUP loads, the next tick must not load again (a
                // change made just before it counted twice).
                last = fingerprint(&path);
                "SIGHUP"
            }
            _ = tick.tick() => {
                let now = fingerprint(&path);
                if now == last || now.is_none() {
                    continue;
                }
                last = now;
                "file change"
            }
        };
        // A file truncated for rewriting reads as empty, and an empty file is a valid
        // configuration without backends: reloading it would drop every backend.
        let loaded = match std::fs::read(&path) {
            Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Err(format!(
                "{} is empty (a write in progress?); a configuration without backends is not taken on reload",
                path.display()
            )),
            _ => Config::load(&path).map_err(|e| e.to_string()),
        };
        match loaded {
            Ok(mut config) => {
                if let Some(addr) = listen {
                    config.server.listen = addr;
                }
                tracing::info!(trigger = why, path = %path.display(), "reloading configuration");
                gateway.reload(&config).await;
            }
            Err(e) => {
                gateway.reload_refused();
                tracing::error!(trigger = why, cause = %e, "new configuration refused; the running one stays")
            }
        }
    }
}

fn sha_of(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Resolves on Ctrl-C or SIGTERM (ends `serve` and `demo-server --http`).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Prints every problem with its field path; exit 1 if there is any.
fn check_config(path: Option<PathBuf>) -> ExitCode {
    let Some(path) = config_path(path) else {
        return match Config::embedded_default() {
            Ok(c) => {
                println!("embedded default: ok ({} backends)", c.backends.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("embedded default: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let path = path.as_path();
    match Config::load(path) {
        Ok(c) => {
            println!("{}: ok ({} backends)", path.display(), c.backends.len());
            ExitCode::SUCCESS
        }
        Err(ConfigError::Invalid { problems, .. }) => {
            for p in &problems {
                println!("{}: {p}", path.display());
            }
            eprintln!("{} problem(s) found", problems.len());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
