//! The reusable MCP protocol engine behind the built-in demo server.
//!
//! [`catalog`] holds what a server offers (definitions + async handlers), [`server`]
//! the shared [`Server`](server::Server) and the transport's [`Sink`](server::Sink),
//! [`session`] the per-client engine and [`context`] what handlers can do while serving
//! a request. Transports and the demo catalogue come next.

pub mod catalog;
pub mod context;
mod handlers;
pub mod server;
pub mod session;
pub mod uri_template;

use std::net::SocketAddr;

/// Runs the demo server on stdio, or on Streamable HTTP at `http`.
pub async fn run(http: Option<SocketAddr>) -> std::io::Result<()> {
    let _ = http;
    Err(std::io::Error::other("demo server not implemented yet"))
}
