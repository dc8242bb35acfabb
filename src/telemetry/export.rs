//! The HTTP client the OTLP exporter POSTs with: the reqwest 0.12 client the
//! gateway already has (rustls, native roots), so an `https://` collector works
//! and no second HTTP stack is built in.
//!
//! The SDK's batch processor exports from its own thread, outside the Tokio
//! runtime; reqwest needs the runtime, so each export is spawned on it and the
//! thread waits for the task.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most bytes of a collector's answer that are read.
const MAX_ANSWER: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub(super) struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl ExportClient {
    /// Must be called inside the runtime. Errors: no runtime, or no client.
    pub(super) fn new(timeout: Duration) -> Result<Self, String> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(ExportClient {
            client,
            runtime,
            timeout,
        })
    }
}

async fn send(
    client: reqwest::Client,
    timeout: Duration,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let (parts, body) = request.into_parts();
    let resp = client
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .timeout(timeout)
        .send()
        .await?;
    if resp.content_length().is_some_and(|n| n > MAX_ANSWER) {
        return Err("collector answer too large".into());
    }
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.bytes().await?;
    let mut out = Response::builder().status(status).body(body)?;
    *out.headers_mut() = headers;
    Ok(out)
}

impl HttpClient for ExportClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let task = self
            .runtime
            .spawn(send(self.client.clone(), self.timeout, request));
        Box::pin(async move { task.await? })
    }
}
