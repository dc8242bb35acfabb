//! The `mcpgate` command line: `serve`, `check-config` and `demo-server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        /// Config file: TOML, or a JSON file in the `mcpServers` format.
        #[arg(long, short, default_value = "config/mcpgate.toml", env = "MCPGATE_CONFIG")]
        config: PathBuf,
        /// Override `server.listen` (e.g. 127.0.0.1:8080).
        #[arg(long, env = "MCPGATE_LISTEN")]
        listen: Option<SocketAddr>,
    },
    /// Validate a config file and print every problem with its field path.
    CheckConfig {
        /// Config file to check.
        #[arg(long, short, default_value = "config/mcpgate.toml")]
        config: PathBuf,
    },
    /// Run the built-in demo MCP server (stdio by default).
    DemoServer {
        /// Serve Streamable HTTP on this address instead of stdio.
        #[arg(long)]
        http: Option<SocketAddr>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcpgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::DemoServer { http } => runtime.block_on(mcpgate::demo::run(http)).map_err(anyhow::Error::from),
        Command::Serve { .. } | Command::CheckConfig { .. } => Err(anyhow::anyhow!("not wired yet")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}
