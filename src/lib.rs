//! mcpgate: a Model Context Protocol gateway.
pub mod config;
pub mod demo;
pub mod jsonrpc;
