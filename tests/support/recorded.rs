//! One request a fake HTTP backend received (`fake_http.rs`, `FakeHttp::log`).

use std::collections::BTreeMap;

use serde_json::Value;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`, `DELETE`, ...
    pub http_method: String,
    /// Headers by lower-case name (several values joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The JSON body, if any.
    pub body: Option<Value>,
    /// The status the fake answered.
    pub status: u16,
}

impl Recorded {
    /// The JSON-RPC method of the body, if it has one.
    pub fn rpc_method(&self) -> Option<&str> {
        self.body.as_ref()?.get("method")?.as_str()
    }

    /// A header value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}
