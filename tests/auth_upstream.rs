//! Upstream credentials: a backend behind client credentials receives the gateway's
//! own token, a token-exchange backend a token issued for the caller, a static
//! backend its secret-file headers — and no request to any backend ever carries the
//! host's token. A backend refusing the gateway's credentials is a JSON-RPC error
//! naming it, not the gateway's 401.

mod auth_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use auth_support::{Backend, Host, Issuer, gateway};
use serde_json::json;

const RESOURCE: &str = "https://gw.example.test/mcp";

struct World {
    issuer: Issuer,
    cc: Backend,
    xchg: Backend,
    plain: Backend,
    host: Host,
    _gw: mcpgate::Gateway,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn setup(expires_in: u64) -> World {
    let issuer = Issuer::start().await;
    *issuer.state.expires_in.lock().unwrap() = expires_in;
    let (cc, xchg, plain) = (
        Backend::start().await,
        Backend::start().await,
        Backend::start().await,
    );
    *cc.state.require_prefix.lock().unwrap() = Some("Bearer gw-token-".into());
    *xchg.state.require_prefix.lock().unwrap() = Some("Bearer ".into());
    let dir = std::env::temp_dir().join(format!(
        "mcpgate-auth-upstream-{}",
        std::process::id() as u64 * 1000 + rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), "xchg-secret\n").unwrap();
    std::fs::write(dir.join("headers"), "# mounted secret\nX-Api-Key: k-123\n").unwrap();
    let toml = format!(
        r#"
        [auth]
        resource = "{RESOURCE}"
        issuers = ["{iss}"]

        [backends.cc]
        type = "http"
        url = "{cc}"
        [backends.cc.auth]
        type = "client_credentials"
        token_url = "{iss}/token"
        client_id = "mcpgate"
        client_secret = "cc-secret"
        scopes = ["backend:read"]
        resource = "{cc}"

        [backends.xchg]
        type = "http"
        url = "{xchg}"
        mode = "per_session"
        [backends.xchg.auth]
        type = "token_exchange"
        token_url = "{iss}/token"
        client_id = "mcpgate"
        client_secret_file = "{secret}"
        audience = "backend-2"

        [backends.plain]
        type = "http"
        url = "{plain}"
        headers_file = "{headers}"
        "#,
        iss = issuer.url,
        cc = cc.url,
        xchg = xchg.url,
        plain = plain.url,
        secret = dir.join("secret").display(),
        headers = dir.join("headers").display(),
    );
    let gw = gateway(&toml).await;
    let host = Host::new(&gw);
    World {
        issuer,
        cc,
        xchg,
        plain,
        host,
        _gw: gw,
        _dir: TempDir(dir),
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        % 1000
}

fn grants(w: &World, grant: &str) -> Vec<std::collections::HashMap<String, String>> {
    w.issuer
        .state
        .token_requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.get("grant_type").map(String::as_str) == Some(grant))
        .cloned()
        .collect()
}

#[tokio::test]
async fn backends_get_their_own_credentials_never_the_hosts_token() {
    let w = setup(3600).await;
    let alice = w.issuer.mint(&w.issuer.claims("alice", "mcp", RESOURCE));
    let s = w.host.initialize(Some(&alice)).await;
    for tool in ["cc__echo", "xchg__echo", "plain__echo", "cc__echo"] {
        let r = w
            .host
            .rpc(
                Some(&alice),
                &s,
                "tools/call",
                json!({"name": tool, "arguments": {"text": "hi"}}),
            )
            .await;
        assert!(r["result"]["content"].is_array(), "{tool}: {r}");
    }
    // Client credentials: the gateway's token, obtained once per backend and reused.
    for r in w.cc.requests() {
        let a = r.headers.get("authorization").unwrap().to_str().unwrap();
        assert!(a.starts_with("Bearer gw-token-"), "{a}");
    }
    let cc_grants = grants(&w, "client_credentials");
    let for_cc: Vec<_> = cc_grants
        .iter()
        .filter(|g| g.get("resource") == Some(&w.cc.url))
        .collect();
    assert_eq!(for_cc.len(), 1, "cached: {cc_grants:?}");
    assert_eq!(for_cc[0]["scope"], "backend:read");
    assert!(
        for_cc[0]["_authorization"].starts_with("Basic "),
        "{for_cc:?}"
    );
    // Token exchange: the session's calls carry a token issued for alice.
    let exchanges = grants(&w, "urn:ietf:params:oauth:grant-type:token-exchange");
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(exchanges[0]["subject_token"], alice);
    assert_eq!(exchanges[0]["audience"], "backend-2");
    let calls: Vec<_> = w
        .xchg
        .requests()
        .into_iter()
        .filter(|r| r.body["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1);
    let a = calls[0]
        .headers
        .get("authorization")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(a.starts_with("Bearer exchanged-for-alice-"), "{a}");
    // Static headers from a secret file.
    for r in w.plain.requests() {
        assert_eq!(r.headers.get("x-api-key").unwrap(), "k-123");
        assert!(r.headers.get("authorization").is_none());
    }
    // The host's token reached no backend, in any header.
    for b in [&w.cc, &w.xchg, &w.plain] {
        assert!(!b.requests().is_empty());
        for r in b.requests() {
            for (name, value) in &r.headers {
                let v = String::from_utf8_lossy(value.as_bytes());
                assert!(!v.contains(&alice), "host token forwarded in {name}");
            }
        }
    }
}

#[tokio::test]
async fn a_backend_refusing_our_credentials_is_a_json_rpc_error_naming_it() {
    let w = setup(3600).await;
    let alice = w.issuer.mint(&w.issuer.claims("alice", "mcp", RESOURCE));
    let s = w.host.initialize(Some(&alice)).await;
    let call = json!({"name": "cc__echo", "arguments": {"text": "hi"}});
    assert!(
        w.host
            .rpc(Some(&alice), &s, "tools/call", call.clone())
            .await["result"]
            .is_object()
    );
    *w.cc.state.require.lock().unwrap() = Some("Bearer something-else".into());
    let before = w.issuer.state.issued.load(Ordering::SeqCst);
    let r = w
        .host
        .rpc(Some(&alice), &s, "tools/call", call.clone())
        .await;
    let e = &r["error"];
    assert_eq!(e["code"], -32603, "{r}");
    assert_eq!(e["data"]["backend"], "cc", "{r}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("\"cc\"") && msg.contains("401"), "{msg}");
    // The refused token is dropped: the next call fetches a new one.
    *w.cc.state.require.lock().unwrap() = None;
    assert!(w.host.rpc(Some(&alice), &s, "tools/call", call).await["result"].is_object());
    assert!(w.issuer.state.issued.load(Ordering::SeqCst) > before);
}

#[tokio::test]
async fn client_credentials_are_refreshed_before_expiry_one_at_a_time() {
    let w = setup(2).await;
    let alice = w.issuer.mint(&w.issuer.claims("alice", "mcp", RESOURCE));
    let s = w.host.initialize(Some(&alice)).await;
    let call = json!({"name": "cc__echo", "arguments": {"text": "hi"}});
    assert!(
        w.host
            .rpc(Some(&alice), &s, "tools/call", call.clone())
            .await["result"]
            .is_object()
    );
    let count = || {
        grants(&w, "client_credentials")
            .iter()
            .filter(|g| g.get("resource") == Some(&w.cc.url))
            .count()
    };
    assert_eq!(count(), 1);
    // 2 s lifetime: refreshed after 1.6 s, before the token expires.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let calls = (0..5).map(|i| {
        w.host
            .rpc_id(100 + i, Some(&alice), &s, "tools/call", call.clone())
    });
    for r in futures_util::future::join_all(calls).await {
        assert!(r["result"].is_object(), "{r}");
    }
    assert_eq!(count(), 2, "one refresh for five concurrent calls");
}
