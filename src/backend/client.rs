//! The HTTP client of Streamable HTTP backends: hyper-util's pooled client,
//! or reqwest where the environment names a proxy.
//!
//! reqwest runs every request through its redirect and retry layers, which
//! parse the URL again for each request (and once more for the response):
//! ~20,000 instructions per backend call, more than hyper's own client work
//! (callgrind, `http_echo_c16`). The direct client sends the request as hyper
//! does, with reqwest's connection settings (TCP_NODELAY, keep-alive probes
//! every 15 s, 30 s TCP user timeout, 10 s connect timeout, 90 s idle pool,
//! HTTP/2 by ALPN over TLS with the platform's root certificates). The proxy
//! variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`) are
//! reqwest's to interpret: with one set, or without usable root certificates,
//! requests go through reqwest as before.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Pooled;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Most idle connections kept per backend host (as before with reqwest).
const MAX_IDLE_PER_HOST: usize = 64;
/// Connect timeout (as before with reqwest).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A transport error, described without URL secrets (query strings may hold
/// keys): the error and its sources, `: `-separated.
#[derive(Debug)]
pub(crate) struct ClientError(String);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ClientError {
    fn new(e: &(dyn std::error::Error + 'static)) -> Self {
        let mut out = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            out.push_str(": ");
            out.push_str(&s.to_string());
            src = s.source();
        }
        ClientError(out)
    }

    fn reqwest(e: reqwest::Error) -> Self {
        ClientError::new(&e.without_url())
    }
}

/// Where requests go: the backend's URL, parsed once for each client.
pub(crate) struct Target {
    uri: Uri,
    url: reqwest::Url,
}

impl Target {
    /// Parses `url` (`http` or `https`, absolute).
    ///
    /// Errors: the parser's message.
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let url = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
        let uri = url.as_str().parse::<Uri>().map_err(|e| e.to_string())?;
        Ok(Target { uri, url })
    }
}

/// One backend's HTTP client (a pool of connections); cheap to clone.
#[derive(Clone)]
pub(crate) enum HttpClient {
    /// hyper-util's client (boxed: ten times the size of reqwest's handle).
    Direct(Box<Pooled<HttpsConnector<HttpConnector>, Full<Bytes>>>),
    /// reqwest, for proxies.
    Proxied(reqwest::Client),
}

impl HttpClient {
    /// The direct client, unless a proxy is configured (`proxied`) or the
    /// platform has no usable root certificates; reqwest's `fallback` then.
    pub(crate) fn new(proxied: bool, fallback: impl FnOnce() -> reqwest::Client) -> HttpClient {
        match tls_config() {
            Some(tls) if !proxied => HttpClient::Direct(Box::new(direct(tls))),
            _ => HttpClient::Proxied(fallback()),
        }
    }

    /// Sends one request and returns the response once its head arrived.
    ///
    /// Errors: connecting, TLS, writing the request or reading the response
    /// head failed.
    pub(crate) async fn send(
        &self,
        method: Method,
        to: &Target,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response<Body>, ClientError> {
        match self {
            HttpClient::Direct(client) => {
                let mut req = Request::new(Full::new(body));
                *req.method_mut() = method;
                *req.uri_mut() = to.uri.clone();
                *req.headers_mut() = headers;
                let resp = client
                    .request(req)
                    .await
                    .map_err(|e| ClientError::new(&e))?;
                Ok(resp.map(Body::Direct))
            }
            HttpClient::Proxied(client) => {
                let resp = client
                    .request(method, to.url.clone())
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(ClientError::reqwest)?;
                Ok(http::Response::from(resp).map(Body::Proxied))
            }
        }
    }
}

/// The rustls configuration of every direct client: the platform's roots,
/// loaded once per process (`None`: none usable).
fn tls_config() -> Option<rustls::ClientConfig> {
    static TLS: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    let tls = TLS.get_or_init(|| {
        use hyper_rustls::ConfigBuilderExt;
        let builder = rustls::ClientConfig::builder().with_native_roots();
        match builder {
            Ok(b) => Some(Arc::new(b.with_no_client_auth())),
            Err(e) => {
                tracing::warn!(cause = %e, "no root certificates for HTTPS backends; using reqwest's client");
                None
            }
        }
    });
    tls.as_deref().cloned()
}

fn direct(tls: rustls::ClientConfig) -> Pooled<HttpsConnector<HttpConnector>, Full<Bytes>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_keepalive(Some(Duration::from_secs(15)));
    http.set_keepalive_interval(Some(Duration::from_secs(15)));
    http.set_keepalive_retries(Some(3));
    http.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Pooled::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .build(https)
}

/// A response body from either client.
pub(crate) enum Body {
    Direct(hyper::body::Incoming),
    Proxied(reqwest::Body),
}

impl Body {
    /// The whole body.
    ///
    /// Errors: the connection failed while it was read.
    pub(crate) async fn bytes(self) -> Result<Bytes, ClientError> {
        Ok(self.collect().await?.to_bytes())
    }

    /// The body's data as it arrives.
    pub(crate) fn stream(self) -> http_body_util::BodyDataStream<Body> {
        http_body_util::BodyDataStream::new(self)
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = ClientError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        match self.get_mut() {
            Body::Direct(b) => Pin::new(b).poll_frame(cx).map_err(|e| ClientError::new(&e)),
            Body::Proxied(b) => Pin::new(b).poll_frame(cx).map_err(ClientError::reqwest),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Direct(b) => b.is_end_stream(),
            Body::Proxied(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Direct(b) => b.size_hint(),
            Body::Proxied(b) => b.size_hint(),
        }
    }
}
