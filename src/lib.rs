//! mcpgate: a Model Context Protocol gateway.
pub mod demo;
pub mod jsonrpc;
