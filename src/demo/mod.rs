//! The built-in demo MCP server and the reusable protocol engine behind it.
//!
//! `mcpgate demo-server` speaks MCP 2025-03-26, 2025-06-18 and 2025-11-25 over stdio or
//! Streamable HTTP, and serves a catalogue that covers every server scenario of the
//! official conformance suite (`@modelcontextprotocol/conformance` 0.1.16) plus a few
//! tools a person would try. The engine is generic over the catalogue, so tests can
//! build other servers (e.g. scriptable fake backends) from the same parts.
//!
//! # Module map
//! | module | concern |
//! |---|---|
//! | [`catalog`] | [`Tool`](catalog::Tool), [`Resource`](catalog::Resource), [`ResourceTemplate`](catalog::ResourceTemplate), [`Prompt`](catalog::Prompt): JSON definitions passed through untouched + async handler closures; [`Catalog`] with completer and page size; result builders |
//! | [`server`] | [`Server`]: identity, capabilities, catalogue snapshot, live sessions; [`Server::update_catalog`] sends `list_changed`, [`Server::notify_resource_updated`] sends `resources/updated`; the transport's [`Sink`](server::Sink) and [`Route`](server::Route) |
//! | [`session`] | [`Session`](session::Session): one client's engine: version negotiation, request dispatch, concurrency, `notifications/cancelled`, server→client request correlation, 2025-03-26 batches |
//! | [`context`] | [`RequestContext`](context::RequestContext) given to handlers: progress, logs, sampling / elicitation / roots requests, cancellation, SSE stream closing; [`Peer`](context::Peer) for unrelated messages |
//! | `handlers` | the MCP methods (`initialize`, `tools/*`, `resources/*`, `prompts/*`, `completion/complete`, `logging/setLevel`, `ping`) |
//! | [`stdio`] | newline-delimited JSON-RPC on any reader/writer ([`stdio::serve`]) or stdin/stdout |
//! | [`http`], `streams`, `headers` | Streamable HTTP: [`HttpServer`] (sessions, JSON/SSE answers, GET stream, resumption, DELETE), SSE stream buffers, header checks; [`HttpOptions`] |
//! | `tools`, `content`, [`media`], [`uri_template`] | the demo catalogue and its generated PNG/WAV media |
//!
//! # Building another server on the engine
//! ```no_run
//! use std::time::Duration;
//!
//! use mcpgate::demo::catalog::{Catalog, Tool, text_result};
//! use mcpgate::demo::http::{HttpOptions, HttpServer, ResponseMode};
//! use mcpgate::demo::server::{Server, ServerInfo};
//! use serde_json::{Value, json};
//!
//! # async fn example() -> std::io::Result<()> {
//! let slow_echo = Tool::new(
//!     json!({"name": "echo", "description": "Echo", "inputSchema": {"type": "object"}}),
//!     |args: Value, ctx| async move {
//!         tokio::time::sleep(Duration::from_millis(50)).await; // an artificial delay
//!         ctx.progress(1.0, Some(1.0), None);
//!         Ok(text_result(args["text"].as_str().unwrap_or_default()))
//!     },
//! );
//! let info = ServerInfo { name: "fake".into(), version: "0".into(), title: None, instructions: None };
//! let server = Server::new(info, Catalog::new().with_tool(slow_echo).with_page_size(2));
//!
//! // Over stdio (any AsyncRead/AsyncWrite pair works, e.g. tokio::io::duplex in tests):
//! // mcpgate::demo::stdio::serve_stdio(server.clone()).await?;
//!
//! // Over Streamable HTTP, with knobs a gateway test may want:
//! let http = HttpServer::new(server, HttpOptions {
//!     strict_accept: true,
//!     response_mode: ResponseMode::Json,
//!     ..HttpOptions::default()
//! });
//! let router = http.router(); // add axum layers to record requests and headers
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! tokio::spawn(async move { axum::serve(listener, router).await });
//! http.drop_sessions(); // clients now get 404 and must re-initialize
//! # Ok(())
//! # }
//! ```
//! Crash-after-N-calls and similar faults belong in handlers (a counter, then
//! `std::process::exit` in a stdio fixture binary); the catalogue can change at run time
//! with [`Server::update_catalog`].

pub mod catalog;
mod content;
pub mod context;
mod handlers;
mod headers;
pub mod http;
pub mod media;
pub mod server;
pub mod session;
pub mod stdio;
mod streams;
mod tools;
pub mod uri_template;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::demo::catalog::Catalog;
use crate::demo::http::{HostPolicy, HttpOptions, HttpServer};
use crate::demo::server::{Server, ServerInfo};

/// The demo catalogue: conformance-suite tools, resources and prompts plus friendly ones.
pub fn demo_catalog() -> Catalog {
    let counter = Arc::new(AtomicU64::new(0));
    let mut catalog = Catalog::new().with_completer(content::complete);
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
    catalog
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

/// The demo server's Streamable HTTP router (endpoint [`http::ENDPOINT`], loopback
/// `Host`/`Origin` only), for serving in-process, e.g. on `127.0.0.1:0` in tests.
pub fn http_router() -> axum::Router {
    HttpServer::new(demo_server(), HttpOptions::default()).router()
}

/// Runs the demo server on stdio (`http` is `None`) until stdin ends, or on Streamable
/// HTTP at `http` (path `/mcp`) until Ctrl-C or SIGTERM. Over HTTP, the endpoint URL
/// (`http://ADDR/mcp`, with the bound port when `http` asked for port 0) is printed
/// on stdout once listening. Logs go to stderr only.
///
/// Errors: stdio I/O failed, or the address could not be bound.
pub async fn run(http: Option<SocketAddr>) -> std::io::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let Some(addr) = http else {
        return stdio::serve_stdio(demo_server()).await;
    };
    let options = HttpOptions {
        host_policy: if addr.ip().is_loopback() {
            HostPolicy::Localhost
        } else {
            HostPolicy::SameOrigin
        },
        ..HttpOptions::default()
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
    let server = HttpServer::new(demo_server(), options);
    let router = server.router();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            // Open SSE streams would otherwise keep the graceful shutdown waiting.
            let ended = server.drop_sessions();
            tracing::info!(sessions = ended, "shutting down");
        })
        .await
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
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
        ] {
            assert!(c.prompt(prompt).is_some(), "{prompt}");
        }
        let tools = c.list_page("tools/list", None).unwrap_or_default();
        for t in tools["tools"].as_array().into_iter().flatten() {
            assert!(t["description"].is_string(), "{t}");
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        }
        let caps = demo_server().capabilities().clone();
        assert_eq!(caps["resources"]["subscribe"], true);
        assert!(caps["completions"].is_object() && caps["logging"].is_object());
    }
}
