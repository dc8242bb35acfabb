//! Bearer validation on the MCP endpoint: malformed, expired, not yet valid,
//! foreign-issuer, wrong-audience, badly signed and query-string tokens; the RFC
//! 6750 / RFC 9728 challenge (every 401 names the resource metadata, served at the
//! path-inserted URL), metadata documents, CORS headers on a 401 so a browser host
//! can read it, JWKS outages and key rotation, and the non-loopback safe default.

mod auth_support;

use std::time::Duration;

use auth_support::{Backend, Host, Issuer, gateway, now, raw_token, sign};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const RESOURCE: &str = "https://gw.example.test/mcp";
const PRM: &str = "https://gw.example.test/.well-known/oauth-protected-resource/mcp";

fn config(issuer: &Issuer, backend: &Backend, extra_auth: &str) -> String {
    format!(
        r#"
        [server]
        allowed_origins = ["https://app.allowed.test"]
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{}"]
        required_scopes = ["mcp:tools"]
        {extra_auth}
        [backends.rec]
        type = "http"
        url = "{}"
        "#,
        issuer.url, backend.url
    )
}

async fn setup(extra_auth: &str) -> (Issuer, Backend, mcpgate::Gateway, Host) {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let gw = gateway(&config(&issuer, &backend, extra_auth)).await;
    let host = Host::new(&gw);
    (issuer, backend, gw, host)
}

fn init_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
}

/// Posts `initialize` with a raw Authorization header value (or none).
async fn init_with(host: &Host, authorization: Option<&str>) -> auth_support::Answer {
    let mut req = host
        .http
        .post(&host.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init_body().to_string());
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    host.send(req).await
}

fn assert_challenge(a: &auth_support::Answer, status: u16, error: Option<&str>) {
    assert_eq!(a.status, status, "{}", a.text);
    let www = a.header("www-authenticate").expect("WWW-Authenticate");
    assert!(www.starts_with("Bearer "), "{www}");
    assert!(
        www.contains(&format!("resource_metadata=\"{PRM}\"")),
        "{www}"
    );
    assert!(www.contains("scope=\"mcp:tools\""), "{www}");
    match error {
        Some(e) => assert!(www.contains(&format!("error=\"{e}\"")), "{www}"),
        None => assert!(!www.contains("error="), "{www}"),
    }
    assert!(
        !www.contains("error_description"),
        "no validation details: {www}"
    );
}

#[tokio::test]
async fn missing_token_gets_the_challenge_on_post_get_and_delete() {
    let (_i, _b, _gw, host) = setup("").await;
    assert_challenge(&init_with(&host, None).await, 401, None);
    let get = host
        .send(
            host.http
                .get(&host.url)
                .header("accept", "text/event-stream"),
        )
        .await;
    assert_challenge(&get, 401, None);
    let del = host
        .send(host.http.delete(&host.url).header("mcp-session-id", "x"))
        .await;
    assert_challenge(&del, 401, None);
}

#[tokio::test]
async fn header_variants_all_carry_resource_metadata() {
    let (_i, _b, _gw, host) = setup("").await;
    assert_challenge(&init_with(&host, Some("Basic dTpw")).await, 401, None);
    for bad in [
        "Bearer",
        "Bearer   ",
        "Bearer not.a.jwt",
        "Bearer opaque-token",
    ] {
        let a = init_with(&host, Some(bad)).await;
        assert_challenge(&a, 401, Some("invalid_token"));
    }
}

#[tokio::test]
async fn a_valid_token_is_accepted_and_aud_may_be_an_array() {
    let (issuer, _b, _gw, host) = setup("").await;
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    host.initialize(Some(&t)).await;
    let mut c = issuer.claims("alice", "mcp:tools", RESOURCE);
    c["aud"] = json!(["https://other.example", RESOURCE]);
    host.initialize(Some(&issuer.mint(&c))).await;
    // `scp` arrays count as scopes too.
    let mut c = issuer.claims("alice", "", RESOURCE);
    c["scp"] = json!(["mcp:tools"]);
    host.initialize(Some(&issuer.mint(&c))).await;
}

#[tokio::test]
async fn bad_tokens_are_invalid_token() {
    let (issuer, _b, _gw, host) = setup("").await;
    let base = || issuer.claims("mallory", "mcp:tools", RESOURCE);
    let mut cases: Vec<(&str, String)> = Vec::new();
    let mut c = base();
    c["exp"] = json!(now() - 3600);
    c["iat"] = json!(now() - 7200);
    cases.push(("expired", issuer.mint(&c)));
    let mut c = base();
    c["nbf"] = json!(now() + 3600);
    cases.push(("not yet valid", issuer.mint(&c)));
    let mut c = base();
    c["iss"] = json!("https://evil.example");
    cases.push(("wrong issuer", issuer.mint(&c)));
    let mut c = base();
    c["aud"] = json!("https://other.example/mcp");
    cases.push(("wrong audience", issuer.mint(&c)));
    let mut c = base();
    c["aud"] = json!(["https://a.example", "https://b.example"]);
    cases.push(("audience array without us", issuer.mint(&c)));
    let mut c = base();
    c.as_object_mut().unwrap().remove("aud");
    cases.push(("no audience", issuer.mint(&c)));
    let mut c = base();
    c.as_object_mut().unwrap().remove("exp");
    cases.push(("no exp", issuer.mint(&c)));
    let mut c = base();
    c.as_object_mut().unwrap().remove("sub");
    cases.push(("no sub", issuer.mint(&c)));
    cases.push((
        "unknown kid",
        sign("key2", Some("key2"), Algorithm::RS256, &base()),
    ));
    cases.push((
        "kid of key1, signed by key2",
        sign("key2", Some("key1"), Algorithm::RS256, &base()),
    ));
    cases.push((
        "alg none",
        raw_token(&json!({"alg": "none", "typ": "JWT"}), &base(), b""),
    ));
    cases.push((
        "alg none without signature",
        raw_token(&json!({"alg": "none", "kid": "key1"}), &base(), b"")
            .trim_end_matches('.')
            .to_owned()
            + ".",
    ));
    // Key confusion: HS256 keyed with the issuer's public key (PEM bytes and JWK).
    let public_pem = auth_support::fixture("key1.pub.pem");
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("key1".into());
    let hs = jsonwebtoken::encode(
        &h,
        &base(),
        &EncodingKey::from_secret(public_pem.as_bytes()).unwrap(),
    )
    .unwrap();
    cases.push(("HS256 with the public key as secret", hs));
    let mut tampered = issuer.mint(&base());
    tampered.push('A');
    cases.push(("bad signature", tampered));
    let huge = raw_token(
        &json!({"alg": "RS256", "kid": "key1", "x": "x".repeat(64 * 1024)}),
        &base(),
        b"sig",
    );
    cases.push(("huge header", huge));
    for (what, token) in cases {
        let a = init_with(&host, Some(&format!("Bearer {token}"))).await;
        assert_eq!(a.status, 401, "{what}: {}", a.text);
        assert_challenge(&a, 401, Some("invalid_token"));
    }
}

#[tokio::test]
async fn token_in_query_string_is_refused() {
    let (issuer, _b, _gw, host) = setup("").await;
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    for with_header in [false, true] {
        let mut req = host
            .http
            .post(format!("{}?access_token={t}", host.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init_body().to_string());
        if with_header {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let a = host.send(req).await;
        assert_challenge(&a, 400, Some("invalid_request"));
    }
}

#[tokio::test]
async fn missing_scope_is_403_insufficient_scope() {
    let (issuer, _b, _gw, host) = setup("").await;
    let t = issuer.mint(&issuer.claims("bob", "profile", RESOURCE));
    assert_challenge(
        &init_with(&host, Some(&format!("Bearer {t}"))).await,
        403,
        Some("insufficient_scope"),
    );
}

#[tokio::test]
async fn metadata_at_path_inserted_and_root_urls() {
    let (issuer, _b, _gw, host) = setup("").await;
    let a = host
        .send(host.http.get(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            host.base
        )))
        .await;
    assert_eq!(a.status, 200);
    let doc = a.json();
    assert_eq!(doc["resource"], RESOURCE);
    assert_eq!(doc["authorization_servers"], json!([issuer.url]));
    assert_eq!(doc["scopes_supported"], json!(["mcp:tools"]));
    assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    let root = host
        .send(host.http.get(format!(
            "{}/.well-known/oauth-protected-resource",
            host.base
        )))
        .await;
    assert_eq!(root.status, 200);
    assert_eq!(root.json()["resource"], "https://gw.example.test");
    // The root resource is ours too: a token for it is accepted.
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", "https://gw.example.test"));
    host.initialize(Some(&t)).await;
}

#[tokio::test]
async fn root_metadata_can_be_turned_off() {
    let (issuer, _b, _gw, host) = setup("root_metadata = false").await;
    let root = host
        .send(host.http.get(format!(
            "{}/.well-known/oauth-protected-resource",
            host.base
        )))
        .await;
    assert_eq!(root.status, 404);
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", "https://gw.example.test"));
    assert_challenge(
        &init_with(&host, Some(&format!("Bearer {t}"))).await,
        401,
        Some("invalid_token"),
    );
}

#[tokio::test]
async fn a_401_carries_cors_headers_for_allowed_browsers() {
    let (_i, _b, _gw, host) = setup("").await;
    let a = host
        .send(
            host.http
                .post(&host.url)
                .header("origin", "https://app.allowed.test")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(init_body().to_string()),
        )
        .await;
    assert_challenge(&a, 401, None);
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://app.allowed.test")
    );
    let exposed = a
        .header("access-control-expose-headers")
        .unwrap_or("")
        .to_ascii_lowercase();
    assert!(exposed.contains("www-authenticate"), "{exposed}");
    // A hostile origin is refused before authentication.
    let evil = host
        .send(
            host.http
                .post(&host.url)
                .header("origin", "https://evil.example.test")
                .header("content-type", "application/json")
                .body(init_body().to_string()),
        )
        .await;
    assert_eq!(evil.status, 403);
}

#[tokio::test]
async fn jwks_down_keeps_cached_keys_working() {
    let (issuer, _b, _gw, host) = setup("jwks_min_refresh_interval = \"50ms\"").await;
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    host.initialize(Some(&t)).await;
    issuer.set_down(true);
    let t2 = issuer.mint(&issuer.claims("carol", "mcp:tools", RESOURCE));
    host.initialize(Some(&t2)).await;
    // An unknown kid cannot be resolved while the issuer is down: a clear 401.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let other = sign(
        "key2",
        Some("key2"),
        Algorithm::RS256,
        &issuer.claims("dan", "mcp:tools", RESOURCE),
    );
    assert_challenge(
        &init_with(&host, Some(&format!("Bearer {other}"))).await,
        401,
        Some("invalid_token"),
    );
    host.initialize(Some(&t)).await;
}

#[tokio::test]
async fn no_keys_at_all_is_a_clear_401_until_the_issuer_is_back() {
    let issuer = Issuer::start().await;
    issuer.set_down(true);
    let backend = Backend::start().await;
    let gw = gateway(&config(
        &issuer,
        &backend,
        "jwks_min_refresh_interval = \"50ms\"",
    ))
    .await;
    let host = Host::new(&gw);
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    assert_challenge(
        &init_with(&host, Some(&format!("Bearer {t}"))).await,
        401,
        Some("invalid_token"),
    );
    issuer.set_down(false);
    tokio::time::sleep(Duration::from_millis(60)).await;
    host.initialize(Some(&t)).await;
}

#[tokio::test]
async fn an_unknown_kid_refetches_the_jwks_rate_limited() {
    let (issuer, _b, _gw, host) = setup("jwks_min_refresh_interval = \"1h\"").await;
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    host.initialize(Some(&t)).await;
    let fetches = issuer
        .state
        .jwks_fetches
        .load(std::sync::atomic::Ordering::SeqCst);
    let rotated = sign(
        "key2",
        Some("key2"),
        Algorithm::RS256,
        &issuer.claims("alice", "mcp:tools", RESOURCE),
    );
    for _ in 0..5 {
        assert_eq!(
            init_with(&host, Some(&format!("Bearer {rotated}")))
                .await
                .status,
            401
        );
    }
    let after = issuer
        .state
        .jwks_fetches
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        after - fetches <= 1,
        "unknown kids must not hammer the issuer: {fetches} -> {after}"
    );
}

#[tokio::test]
async fn key_rotation_is_picked_up_on_an_unknown_kid() {
    let (issuer, _b, _gw, host) = setup("jwks_min_refresh_interval = \"50ms\"").await;
    let t = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    host.initialize(Some(&t)).await;
    issuer.serve_keys(&["key1", "key2"]);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let rotated = sign(
        "key2",
        Some("key2"),
        Algorithm::RS256,
        &issuer.claims("alice", "mcp:tools", RESOURCE),
    );
    host.initialize(Some(&rotated)).await;
}

#[tokio::test]
async fn a_public_bind_without_auth_refuses_to_start() {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let config =
        mcpgate::config::Config::parse("", std::path::Path::new("c.toml"), &|_| None).unwrap();
    let e = mcpgate::Gateway::start_on(config, listener)
        .await
        .err()
        .expect("must refuse");
    assert!(
        matches!(e, mcpgate::StartError::Unauthenticated { .. }),
        "{e}"
    );
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let config = mcpgate::config::Config::parse(
        "[auth]\nallow_unauthenticated = true\n",
        std::path::Path::new("c.toml"),
        &|_| None,
    )
    .unwrap();
    let gw = mcpgate::Gateway::start_on(config, listener).await.unwrap();
    gw.shutdown().await;
}

#[tokio::test]
async fn opaque_tokens_are_introspected() {
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let toml = format!(
        r#"
        [auth]
        resource = "{RESOURCE}"
        issuers = [{{ issuer = "{iss}", introspection_url = "{iss}/introspect", client_id = "gw", client_secret = "s" }}]
        required_scopes = ["mcp:tools"]
        [backends.rec]
        type = "http"
        url = "{url}"
        "#,
        iss = issuer.url,
        url = backend.url
    );
    let gw = gateway(&toml).await;
    let host = Host::new(&gw);
    let s = host.initialize(Some("opaque-alice")).await;
    assert_eq!(host.tool_names(Some("opaque-alice"), &s).await.len(), 4);
    // Bound to the introspected subject.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(
        host.post(Some("opaque-bob"), Some(&s), &list).await.status,
        404
    );
    for bad in ["opaque-inactive", "opaque-elsewhere", "not-opaque"] {
        assert_challenge(
            &init_with(&host, Some(&format!("Bearer {bad}"))).await,
            401,
            Some("invalid_token"),
        );
    }
    // JWTs from the same issuer still verify against its keys.
    let t = issuer.mint(&issuer.claims("carol", "mcp:tools", RESOURCE));
    host.initialize(Some(&t)).await;
}

/// e2e flake under load (Python SDK: "Server disconnected without sending a
/// response" on the request after the first 401): the 401 was sent before the
/// request body had arrived, hyper then closed the connection, and the host had
/// already reused it. The body is now read (bounded) before the challenge, so the
/// connection stays usable.
#[tokio::test]
async fn the_connection_survives_a_401_sent_before_the_body_arrived() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_issuer, _backend, gw, _host) = setup("").await;
    let mut s = tokio::net::TcpStream::connect(gw.local_addr).await.unwrap();
    let body = init_body().to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        gw.local_addr,
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(body.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the 401 (its JSON body ends the response).
    while !String::from_utf8_lossy(&got).contains("Unauthorized\"") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the 401 arrives")
            .unwrap();
        assert!(
            n > 0,
            "closed before the 401: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let first = String::from_utf8_lossy(&got).into_owned();
    assert!(first.starts_with("HTTP/1.1 401"), "{first}");
    // The same connection serves the next request.
    let next = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", gw.local_addr);
    s.write_all(next.as_bytes()).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer on the same connection")
        .unwrap();
    let second = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        second.starts_with("HTTP/1.1 200"),
        "connection closed after the 401: {second:?}"
    );
}
