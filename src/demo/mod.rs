//! The built-in demo MCP server and the reusable protocol engine behind it.
//!
//! [`catalog`] holds what a server offers (definitions + async handlers), [`server`]
//! the shared [`Server`] and the transport's [`Sink`](server::Sink), [`session`] the
//! per-client engine and [`context`] what handlers can do while serving a request.
//! `tools`, `content` and [`media`] make up the demo catalogue; [`stdio`] serves it.

pub mod catalog;
mod content;
pub mod context;
mod handlers;
pub mod media;
pub mod server;
pub mod session;
pub mod stdio;
mod tools;
pub mod uri_template;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::demo::catalog::Catalog;
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

/// Runs the demo server on stdio until stdin ends (logs go to stderr only).
///
/// Errors: stdio I/O failed, or `http` was given (Streamable HTTP is not wired yet).
pub async fn run(http: Option<SocketAddr>) -> std::io::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    if http.is_some() {
        return Err(std::io::Error::other("Streamable HTTP is not wired yet"));
    }
    stdio::serve_stdio(demo_server()).await
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
