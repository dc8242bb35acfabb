//! Harness for the auth integration tests: an in-process authorization server
//! (metadata, JWKS, token endpoint) with locally generated test keys, a recording
//! MCP backend, a gateway started from TOML, and a small host client.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcpgate::Gateway;
use mcpgate::config::Config;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The test keys (tests/fixtures/auth).
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

// ------------------------------------------------------------------ authorization server

#[derive(Default)]
pub struct IssuerState {
    pub url: Mutex<String>,
    pub keys: Mutex<Vec<String>>,
    pub down: AtomicBool,
    pub jwks_fetches: AtomicUsize,
    pub token_requests: Mutex<Vec<HashMap<String, String>>>,
    pub issued: AtomicUsize,
    pub expires_in: Mutex<u64>,
}

/// An authorization server for tests: OIDC discovery, JWKS (key1 unless told
/// otherwise), and a token endpoint for client credentials and RFC 8693.
pub struct Issuer {
    pub url: String,
    pub state: Arc<IssuerState>,
}

impl Issuer {
    pub async fn start() -> Issuer {
        let state = Arc::new(IssuerState::default());
        *state.keys.lock().unwrap() = vec!["key1".into()];
        *state.expires_in.lock().unwrap() = 3600;
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(jwks))
            .route("/token", post(token))
            .route("/introspect", post(introspect))
            .with_state(state.clone());
        let addr = serve(app).await;
        let url = format!("http://{addr}");
        *state.url.lock().unwrap() = url.clone();
        Issuer { url, state }
    }

    pub fn serve_keys(&self, keys: &[&str]) {
        *self.state.keys.lock().unwrap() = keys.iter().map(|k| k.to_string()).collect();
    }

    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Standard claims for `sub` with `scope`, audience `aud`.
    pub fn claims(&self, sub: &str, scope: &str, aud: &str) -> Value {
        let t = now();
        json!({"iss": self.url, "sub": sub, "aud": aud, "scope": scope,
               "iat": t, "nbf": t - 5, "exp": t + 600, "client_id": "host"})
    }

    /// RS256 with key1 and kid key1.
    pub fn mint(&self, claims: &Value) -> String {
        sign("key1", Some("key1"), Algorithm::RS256, claims)
    }
}

/// Signs with a fixture key.
pub fn sign(key: &str, kid: Option<&str>, alg: Algorithm, claims: &Value) -> String {
    let mut h = Header::new(alg);
    h.kid = kid.map(str::to_owned);
    let k = EncodingKey::from_rsa_pem(fixture(&format!("{key}.pem")).as_bytes()).unwrap();
    jsonwebtoken::encode(&h, claims, &k).unwrap()
}

/// A token assembled by hand (for `alg: none`, forged signatures, odd headers).
pub fn raw_token(header: &Value, claims: &Value, signature: &[u8]) -> String {
    let e = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    format!(
        "{}.{}.{}",
        e(header.to_string().as_bytes()),
        e(claims.to_string().as_bytes()),
        e(signature)
    )
}

async fn metadata(State(s): State<Arc<IssuerState>>) -> Response {
    if s.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let url = s.url.lock().unwrap().clone();
    axum::Json(json!({"issuer": url, "jwks_uri": format!("{url}/jwks"),
        "token_endpoint": format!("{url}/token")}))
    .into_response()
}

async fn jwks(State(s): State<Arc<IssuerState>>) -> Response {
    s.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if s.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let keys: Vec<Value> = s
        .keys
        .lock()
        .unwrap()
        .iter()
        .map(|k| serde_json::from_str(&fixture(&format!("{k}.jwk.json"))).unwrap())
        .collect();
    axum::Json(json!({ "keys": keys })).into_response()
}

async fn token(
    State(s): State<Arc<IssuerState>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut recorded = form.clone();
    if let Some(a) = headers.get("authorization") {
        recorded.insert("_authorization".into(), a.to_str().unwrap_or("").into());
    }
    s.token_requests.lock().unwrap().push(recorded);
    let n = s.issued.fetch_add(1, Ordering::SeqCst) + 1;
    let expires_in = *s.expires_in.lock().unwrap();
    let token = match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => format!("gw-token-{n}"),
        Some("urn:ietf:params:oauth:grant-type:token-exchange") => {
            let subject = form.get("subject_token").cloned().unwrap_or_default();
            let sub = subject
                .split('.')
                .nth(1)
                .and_then(|p| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(p)
                        .ok()
                })
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["sub"].as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("exchanged-for-{sub}-{n}")
        }
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "unsupported_grant_type"})),
            )
                .into_response();
        }
    };
    axum::Json(
        json!({"access_token": token, "token_type": "Bearer", "expires_in": expires_in,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}),
    )
    .into_response()
}

/// RFC 7662: `opaque-<sub>` tokens are active for https://gw.example.test/mcp,
/// `opaque-inactive` is not, `opaque-elsewhere` is for another audience.
async fn introspect(
    State(s): State<Arc<IssuerState>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if headers.get("authorization").is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let url = s.url.lock().unwrap().clone();
    let token = form.get("token").cloned().unwrap_or_default();
    let answer = match token.strip_prefix("opaque-") {
        Some("inactive") | None => json!({"active": false}),
        Some("elsewhere") => json!({"active": true, "sub": "x", "aud": "https://other.example",
            "scope": "mcp:tools", "exp": now() + 600}),
        Some(sub) => json!({"active": true, "sub": sub, "iss": url, "scope": "mcp:tools",
            "aud": "https://gw.example.test/mcp", "exp": now() + 600}),
    };
    axum::Json(answer).into_response()
}

// ------------------------------------------------------------------ recording backend

#[derive(Clone, Debug)]
pub struct Recorded {
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
pub struct BackendState {
    pub requests: Mutex<Vec<Recorded>>,
    /// When set, requests without exactly this Authorization get 401.
    pub require: Mutex<Option<String>>,
    /// When set, requests whose Authorization starts with this prefix are accepted.
    pub require_prefix: Mutex<Option<String>>,
}

/// A Streamable HTTP MCP server that records every request.
pub struct Backend {
    pub url: String,
    pub state: Arc<BackendState>,
}

impl Backend {
    pub async fn start() -> Backend {
        let state = Arc::new(BackendState::default());
        let app = Router::new()
            .route(
                "/mcp",
                post(backend_post)
                    .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(state.clone());
        let addr = serve(app).await;
        Backend {
            url: format!("http://{addr}/mcp"),
            state,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.body["method"] == "tools/call")
            .map(|r| r.body["params"].clone())
            .collect()
    }
}

fn backend_tools() -> Value {
    let text =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    json!([
        {"name": "echo", "description": "Echoes text.", "inputSchema": text},
        {"name": "add", "description": "Adds.", "inputSchema": {"type": "object"}},
        {"name": "delete_all", "description": "Deletes everything.", "inputSchema": {"type": "object"}},
        {"name": "file_ticket", "description": "Files a ticket.", "inputSchema": {"type": "object",
            "properties": {"queue": {"type": "string"}, "text": {"type": "string"}},
            "required": ["queue", "text"]}},
    ])
}

async fn backend_post(
    State(s): State<Arc<BackendState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.requests.lock().unwrap().push(Recorded {
        headers: headers.clone(),
        body: msg.clone(),
    });
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let exact = s.require.lock().unwrap().clone();
    let prefix = s.require_prefix.lock().unwrap().clone();
    let refused = exact
        .as_ref()
        .is_some_and(|want| presented.as_ref() != Some(want))
        || prefix
            .as_ref()
            .is_some_and(|p| !presented.as_deref().unwrap_or("").starts_with(p.as_str()));
    if refused {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let method = msg["method"].as_str().unwrap_or("");
    let result = match method {
        "initialize" => json!({"protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
            "serverInfo": {"name": "recording-backend", "version": "1"}}),
        "tools/list" => json!({ "tools": backend_tools() }),
        "prompts/list" => json!({"prompts": [{"name": "greet"}]}),
        "resources/list" => json!({"resources": [
            {"uri": "mem://public/readme", "name": "readme"},
            {"uri": "mem://private/payroll", "name": "payroll"}]}),
        "resources/templates/list" => json!({"resourceTemplates": []}),
        "resources/read" => {
            json!({"contents": [{"uri": msg["params"]["uri"], "text": "contents"}]})
        }
        "tools/call" => {
            let text =
                json!({"tool": msg["params"]["name"], "arguments": msg["params"]["arguments"]});
            json!({"content": [{"type": "text", "text": text.to_string()}]})
        }
        "ping" => json!({}),
        _ => {
            let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}});
            return axum::Json(e).into_response();
        }
    };
    let mut resp =
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    if method == "initialize" {
        resp.headers_mut()
            .insert("mcp-session-id", "backend-session".parse().unwrap());
    }
    resp
}

// ------------------------------------------------------------------ gateway and host

/// Starts a gateway from TOML on 127.0.0.1:0.
pub async fn gateway(toml: &str) -> Gateway {
    let config = Config::parse(toml, Path::new("test.toml"), &|_| None)
        .unwrap_or_else(|p| panic!("config problems: {p:?}"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Gateway::start_on(config, listener).await.unwrap()
}

/// A host speaking Streamable HTTP to the gateway.
pub struct Host {
    pub http: reqwest::Client,
    pub url: String,
    pub base: String,
}

/// One HTTP answer, read completely.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC message in the body (JSON, or the last SSE `data:` line).
    pub fn json(&self) -> Value {
        if let Ok(v) = serde_json::from_str(&self.text) {
            return v;
        }
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    }
}

impl Host {
    pub fn new(gw: &Gateway) -> Host {
        let base = format!("http://{}", gw.local_addr);
        Host {
            http: reqwest::Client::new(),
            url: format!("{base}/mcp"),
            base,
        }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.unwrap();
        Answer {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            text: resp.text().await.unwrap_or_default(),
        }
    }

    /// POSTs a message with the MCP headers.
    pub async fn post(&self, token: Option<&str>, session: Option<&str>, body: &Value) -> Answer {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        self.send(req).await
    }

    /// Initializes a session; returns its id.
    pub async fn initialize(&self, token: Option<&str>) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "auth-test", "version": "1"}}});
        let a = self.post(token, None, &body).await;
        assert_eq!(a.status, 200, "initialize: {}", a.text);
        let id = a.header("mcp-session-id").expect("session id").to_owned();
        let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(self.post(token, Some(&id), &n).await.status, 202);
        id
    }

    /// A request; returns the JSON-RPC response.
    pub async fn rpc(
        &self,
        token: Option<&str>,
        session: &str,
        method: &str,
        params: Value,
    ) -> Value {
        self.rpc_id(7, token, session, method, params).await
    }

    /// A request with its own id (for concurrent requests on one session).
    pub async fn rpc_id(
        &self,
        id: i64,
        token: Option<&str>,
        session: &str,
        method: &str,
        params: Value,
    ) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let a = self.post(token, Some(session), &body).await;
        assert_eq!(a.status, 200, "{method}: {}", a.text);
        a.json()
    }

    /// Exposed tool names from `tools/list`.
    pub async fn tool_names(&self, token: Option<&str>, session: &str) -> Vec<String> {
        let r = self.rpc(token, session, "tools/list", json!({})).await;
        let mut names: Vec<String> = r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }
}
