//! The built-in demo MCP server (placeholder until implemented).

use std::net::SocketAddr;

/// Runs the demo server on stdio, or on Streamable HTTP at `http`.
pub async fn run(http: Option<SocketAddr>) -> std::io::Result<()> {
    let _ = http;
    Err(std::io::Error::other("demo server not implemented yet"))
}
