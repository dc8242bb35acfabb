//! stdio transport: newline-delimited JSON-RPC on any reader/writer pair (stdin/stdout).
//!
//! MCP 2025-11-25 basic/transports "stdio": one message per line, no embedded newlines,
//! nothing but MCP on stdout (logs go to stderr). Requests run concurrently; their
//! responses and everything the server sends meanwhile share one writer task.
//! End of input ends the session: in-flight requests are cancelled, queued output is
//! flushed, and [`serve`] returns.

use std::io;
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::demo::server::{Route, Server, Sink};
use crate::demo::session::Session;
use mcpgate::jsonrpc::{self, ErrorObject, INVALID_REQUEST};
use mcpgate::mcp::Message;

/// Serves one session on the process's stdin and stdout until stdin ends.
pub async fn serve_stdio(server: Server) -> io::Result<()> {
    serve(server, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Every message goes to the single output stream, whatever its route.
struct LineSink(mpsc::UnboundedSender<Vec<u8>>);

impl Sink for LineSink {
    fn send(&self, _route: &Route, message: Vec<u8>) {
        // A closed channel means the writer is gone (output closed); nothing to do.
        let _ = self.0.send(message);
    }
}

/// Serves one session over `reader`/`writer` until `reader` reaches end of input.
///
/// Errors: reading or writing failed. Malformed lines are answered with JSON-RPC
/// errors (`-32700`/`-32600`) and never end the session.
pub async fn serve<R, W>(server: Server, reader: R, writer: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let stop = CancellationToken::new();
    let writer_task = tokio::spawn(write_lines(writer, rx, stop.clone()));
    let session = server.connect(Arc::new(LineSink(tx.clone())));
    let mut tasks = JoinSet::new();
    let read_result = read_loop(&session, reader, &tx, &mut tasks).await;
    session.close();
    tasks.shutdown().await;
    stop.cancel();
    let write_result = writer_task
        .await
        .map_err(|e| io::Error::other(format!("stdout writer failed: {e}")))?;
    read_result.and(write_result)
}

async fn read_loop<R: AsyncRead + Unpin>(
    session: &Session,
    reader: R,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    tasks: &mut JoinSet<()>,
) -> io::Result<()> {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        while tasks.try_join_next().is_some() {}
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        if text.first() == Some(&b'[') {
            spawn_batch(session, text, tx, tasks);
            continue;
        }
        match jsonrpc::parse_message(text) {
            Err(e) => send(tx, jsonrpc::error_bytes(e.id(), &e.to_error_object())),
            // Handled inline so that nothing read after it can overtake the handshake.
            Ok(Message::Request(r)) if r.method == mcpgate::mcp::Method::Initialize => {
                if let Some(out) = session.handle_request(r).await {
                    send(tx, out);
                }
            }
            Ok(Message::Request(r)) => {
                let session = session.clone();
                let tx = tx.clone();
                tasks.spawn(async move {
                    if let Some(out) = session.handle_request(r).await {
                        send(&tx, out);
                    }
                });
            }
            Ok(Message::Notification(n)) => session.handle_notification(n),
            Ok(Message::Response(r)) => session.handle_response(r),
        }
    }
}

fn spawn_batch(
    session: &Session,
    text: &[u8],
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    tasks: &mut JoinSet<()>,
) {
    let items: Vec<Box<RawValue>> = match serde_json::from_slice(text) {
        Ok(items) => items,
        Err(e) => {
            let e = ErrorObject::new(INVALID_REQUEST, format!("Invalid batch: {e}"));
            send(tx, jsonrpc::error_bytes(None, &e));
            return;
        }
    };
    let session = session.clone();
    let tx = tx.clone();
    tasks.spawn(async move {
        if let Some(out) = session.handle_batch(items).await {
            send(&tx, out);
        }
    });
}

fn send(tx: &mpsc::UnboundedSender<Vec<u8>>, message: Vec<u8>) {
    let _ = tx.send(message);
}

/// Writes each message as one line. After `stop`, drains what is queued and returns.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    stop: CancellationToken,
) -> io::Result<()> {
    loop {
        let message = tokio::select! {
            m = rx.recv() => m,
            () = stop.cancelled() => break,
        };
        let Some(message) = message else { break };
        write_line(&mut writer, &message).await?;
    }
    while let Ok(message) = rx.try_recv() {
        write_line(&mut writer, &message).await?;
    }
    writer.flush().await
}

async fn write_line<W: AsyncWrite + Unpin>(writer: &mut W, message: &[u8]) -> io::Result<()> {
    writer.write_all(message).await?;
    writer.write_all(b"\n").await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::demo::demo_server;

    #[tokio::test]
    async fn answers_lines_and_stops_at_end_of_input() {
        let (client, server_side) = tokio::io::duplex(64 * 1024);
        let (server_read, server_write) = tokio::io::split(server_side);
        let task = tokio::spawn(serve(demo_server(), server_read, server_write));
        let (client_read, mut client_write) = tokio::io::split(client);
        let mut lines = BufReader::new(client_read).lines();
        let input = concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}}}\n",
            "not json\n",
            "\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            "[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"},{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}]\n",
        );
        client_write.write_all(input.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let line = lines.next_line().await.unwrap().unwrap();
            got.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        assert_eq!(got[0]["result"]["protocolVersion"], "2025-03-26");
        assert_eq!(got[1]["error"]["code"], -32700);
        let batch = got[2].as_array().unwrap();
        assert_eq!(batch[0], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
        assert_eq!(batch[1]["error"]["code"], -32601);
        client_write.shutdown().await.unwrap();
        drop(client_write);
        task.await.unwrap().unwrap();
    }
}
