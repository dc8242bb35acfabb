//! The built-in demo MCP server of the `mcpgate` binary (`mcpgate demo-server`).
//!
//! It is dual-era over stdio and Streamable HTTP: sessions at MCP 2025-03-26,
//! 2025-06-18 and 2025-11-25 (`initialize`), and stateless 2026-07-28 requests
//! (`params._meta`, `server/discover`, MRTR `input_required` instead of
//! server→client requests, `subscriptions/listen`) next to them on the same
//! connection or endpoint. It serves a catalogue that covers every server scenario
//! of the official conformance suite (`@modelcontextprotocol/conformance` 0.1.16,
//! and 0.2.0-alpha.12's `--requirements 2025-11-25` and `2026-07-28`) plus a few
//! tools a person would try. The embedded default configuration runs it as its backend. It
//! is part of the binary, not of the gateway library, and uses only the library's
//! public API: `mcpgate::jsonrpc` (envelope), `mcpgate::mcp` (methods, list kinds, log
//! levels, revisions) and `mcpgate::streamable_http` (header names and rules, session
//! ids, the SSE event log).
//!
//! # Module map
//! | module | concern |
//! |---|---|
//! | `catalog` | `Tool`, `Resource`, `ResourceTemplate`, `Prompt`: JSON definitions passed through untouched + async handler closures; `DemoCatalog` with its completer; result builders |
//! | `server` | `Server`: identity, capabilities, catalogue snapshot, live sessions; `update_catalog` sends `list_changed`, `notify_resource_updated` sends `resources/updated`; the transport's `Sink` and `Route` |
//! | `session` | `Session`: one client's engine: version negotiation, request dispatch (stateless ones too), concurrency, `notifications/cancelled`, server→client request correlation, 2025-03-26 batches |
//! | `context` | `CallContext` given to handlers: progress, logs, asking the client for input (sampling / elicitation / roots), SSE stream closing |
//! | `handlers` | the MCP methods (`initialize`, `tools/*`, `resources/*`, `prompts/*`, `completion/complete`, `logging/setLevel`, `ping`; stateless: `server/discover`, `subscriptions/listen`) |
//! | `modern`, `mrtr`, `listen` | 2026-07-28: the validation ladder and result shaping; MRTR rounds and the sealed `requestState`; listen streams |
//! | `stdio` | newline-delimited JSON-RPC on stdin/stdout |
//! | `http`, `http_modern`, `streams`, `headers` | Streamable HTTP: `HttpServer` (sessions, JSON/SSE answers, GET stream, resumption, DELETE); stateless POSTs (ladder with headers, JSON or id-less SSE, cancel on close); `Streams`, the session's SSE streams in the library's `streamable_http::EventLog`; the Host/Origin policy and version header check |
//! | `tools`, `mrtr_tools`, `content`, `media`, `uri_template` | the demo catalogue (the 2026-07-28 scenarios' tools in `mrtr_tools`) and its generated PNG/WAV media |
//!
//! The catalogue can change at run time (`toggle_bonus` uses `Server::update_catalog`).

mod catalog;
mod content;
mod context;
mod handlers;
mod headers;
mod http;
mod http_modern;
mod listen;
mod media;
mod modern;
mod mrtr;
mod mrtr_tools;
mod server;
mod session;
mod stdio;
mod streams;
mod tools;
mod uri_template;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::demo::catalog::DemoCatalog;
use crate::demo::http::{HostPolicy, HttpServer};
use crate::demo::server::{Server, ServerInfo};

/// The demo catalogue: conformance-suite tools, resources and prompts plus friendly ones.
pub fn demo_catalog() -> DemoCatalog {
    let counter = Arc::new(AtomicU64::new(0));
    let mut catalog = DemoCatalog::new().with_completer(content::complete);
    for t in tools::all(&counter) {
        catalog = catalog.with_tool(t);
    }
    for r in content::resources(&counter) {
        catalog = catalog.with_resource(r);
    }
    for t in content::templates() {
        catalog = catalog.with_template(t);
    }
    for p in content::prompts() {
        catalog = catalog.with_prompt(p);
    }
    mrtr_tools::add(catalog)
}

/// The demo server: [`demo_catalog`] with mcpgate's identity.
pub fn demo_server() -> Server {
    let info = ServerInfo {
        name: "mcpgate-demo".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        title: Some("mcpgate demo server".into()),
        instructions: Some("A demo server: read demo://readme for a tour of its tools.".into()),
    };
    Server::new(info, demo_catalog())
}

/// Runs the demo server on stdio (`http` is `None`) until stdin ends, or on Streamable
/// HTTP at `http` (path `/mcp`) until Ctrl-C or SIGTERM (`main`'s `shutdown_signal`). Over HTTP, the endpoint URL
/// (`http://ADDR/mcp`, with the bound port when `http` asked for port 0) is printed
/// on stdout once listening. Logs go to stderr only (`main` sets them up).
///
/// Errors: stdio I/O failed, or the address could not be bound.
pub async fn run(http: Option<SocketAddr>) -> std::io::Result<()> {
    let Some(addr) = http else {
        return stdio::serve_stdio(demo_server()).await;
    };
    let host_policy = if addr.ip().is_loopback() {
        HostPolicy::Localhost
    } else {
        HostPolicy::SameOrigin
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    // The endpoint goes to stdout (nothing else is written there in HTTP mode), so
    // a caller that asked for port 0 learns which port it got.
    println!("http://{local}{}", http::ENDPOINT);
    tracing::info!(
        "demo MCP server listening on http://{local}{}",
        http::ENDPOINT
    );
    let server = HttpServer::new(demo_server(), host_policy);
    let router = server.router();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            crate::shutdown_signal().await;
            // Open SSE streams would otherwise keep the graceful shutdown waiting.
            let ended = server.drop_sessions();
            tracing::info!(sessions = ended, "shutting down");
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_catalog_has_the_conformance_names() {
        let c = demo_catalog();
        for tool in [
            "test_simple_text",
            "test_image_content",
            "test_audio_content",
            "test_embedded_resource",
            "test_multiple_content_types",
            "test_tool_with_logging",
            "test_tool_with_progress",
            "test_error_handling",
            "test_sampling",
            "test_elicitation",
            "test_elicitation_sep1034_defaults",
            "test_elicitation_sep1330_enums",
            "json_schema_2020_12_tool",
            "test_reconnection",
            "test_missing_capability",
            "test_streaming_elicitation",
            "test_logging_tool",
            "test_trigger_tool_change",
            "test_trigger_prompt_change",
            "test_input_required_result_elicitation",
            "test_input_required_result_sampling",
            "test_input_required_result_list_roots",
            "test_input_required_result_request_state",
            "test_input_required_result_multiple_inputs",
            "test_input_required_result_multi_round",
            "test_input_required_result_tampered_state",
            "test_input_required_result_capabilities",
        ] {
            assert!(c.tool(tool).is_some(), "{tool}");
        }
        for uri in [
            "test://static-text",
            "test://static-binary",
            "test://watched-resource",
            "test://template/123/data",
        ] {
            assert!(c.has_resource(uri), "{uri}");
        }
        for prompt in [
            "test_simple_prompt",
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image",
            "test_input_required_result_prompt",
        ] {
            assert!(c.prompt(prompt).is_some(), "{prompt}");
        }
        let tools = c
            .list_page(mcpgate::mcp::ListKind::Tools, None)
            .unwrap_or_default();
        for t in tools["tools"].as_array().into_iter().flatten() {
            assert!(t["description"].is_string(), "{t}");
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        }
        let caps = demo_server().capabilities().clone();
        assert_eq!(caps["resources"]["subscribe"], true);
        assert!(caps["completions"].is_object() && caps["logging"].is_object());
    }
}
