//! What a server may ask its client for, in either era: the three server→client
//! requests (`elicitation/create`, `sampling/createMessage`, `roots/list`; MCP
//! 2025-11-25 client/*) and the 2026-07-28 `input_required` result that carries
//! them instead (MCP 2026-07-28 basic/patterns/mrtr). One rule decides, for a
//! host of a given revision and declared capabilities, whether such a request
//! may be put to it — whether as a JSON-RPC request on a legacy session's stream
//! or as an entry of `inputRequests` — and which of its capabilities the gateway
//! can carry to a 2026-07-28 backend on its behalf.

use serde_json::{Map, Value, json};

use super::marks::Marks;
use super::{Method, ProtocolVersion};
use crate::jsonrpc::RawJson;

/// An `InputRequiredResult` (MCP 2026-07-28 basic/patterns/mrtr), parsed.
#[derive(Debug, Default)]
pub struct InputRequired {
    /// `inputRequests`: key → `{method, params}` (may be empty when only
    /// `requestState` was given).
    pub requests: Map<String, Value>,
    /// `requestState`, echoed byte for byte on the retry.
    pub state: Option<String>,
}

/// Whether `raw` is an `InputRequiredResult` (`resultType: "input_required"`);
/// `marks`: the keys its text shows ([`Marks::of`]), parsed only if marked.
pub fn is_input_required(raw: &RawJson, marks: Marks) -> bool {
    #[derive(serde::Deserialize)]
    struct Tagged<'a> {
        #[serde(rename = "resultType", borrow, default)]
        result_type: Option<&'a str>,
    }
    marks.input_required()
        && serde_json::from_slice::<Tagged<'_>>(raw.as_bytes())
            .is_ok_and(|t| t.result_type == Some("input_required"))
}

/// Parses an `InputRequiredResult`. Errors (why it is malformed): neither
/// `inputRequests` nor `requestState`, `inputRequests` not an object of
/// `{method, params?}` requests of the three kinds, `requestState` not a string.
pub fn parse_input_required(raw: &RawJson) -> Result<InputRequired, &'static str> {
    let v: Map<String, Value> = raw.parse().map_err(|_| "the result is not a JSON object")?;
    let requests = match v.get("inputRequests") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err("inputRequests is not an object"),
    };
    let state = match v.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("requestState is not a string"),
    };
    if requests.is_empty() && state.is_none() {
        return Err("neither inputRequests nor requestState");
    }
    if requests.values().any(|r| input_request(r).is_none()) {
        return Err("an input request is not an elicitation, sampling or roots request");
    }
    Ok(InputRequired { requests, state })
}

/// The method and params of one `inputRequests` entry (`{method, params?}`), if
/// it is one of the three kinds a server may ask for.
pub fn input_request(entry: &Value) -> Option<(Method, Option<&Value>)> {
    let method = Method::parse(entry.get("method")?.as_str()?);
    method.client_capability()?;
    let params = entry.get("params");
    if params.is_some_and(|p| !p.is_object() && !p.is_null()) {
        return None;
    }
    Some((method, params.filter(|p| p.is_object())))
}

/// Whether a host of revision `host` that declared client capabilities `caps`
/// may be asked `method` with `params`: only a kind it declared, and only in a
/// form its revision has (MCP 2025-11-25 client/elicitation: URL mode needs
/// `elicitation.url`, form mode `elicitation.form` or the empty object; client/
/// sampling: tool use needs `sampling.tools`; 2025-03-26 has no elicitation,
/// 2025-06-18 no URL mode and no sampling tools; 2026-07-28 mrtr: never an input
/// request the request did not declare).
pub fn may_ask(
    host: ProtocolVersion,
    caps: &Value,
    method: &Method,
    params: Option<&Value>,
) -> bool {
    let Some(name) = method.client_capability() else {
        return false;
    };
    if !host.knows_client_capability(name) {
        return false;
    }
    let Some(cap) = caps.get(name).filter(|c| !c.is_null()) else {
        return false;
    };
    let has = |key: &str| cap.get(key).is_some_and(|v| !v.is_null());
    let since_2025_11 = host >= ProtocolVersion::V2025_11_25;
    match method {
        Method::ElicitationCreate => {
            match params.and_then(|p| p.get("mode")).and_then(Value::as_str) {
                Some("url") => since_2025_11 && has("url"),
                _ => has("form") || cap.as_object().is_some_and(|o| o.is_empty()),
            }
        }
        Method::SamplingCreateMessage => {
            let tools = params.is_some_and(|p| p.get("tools").is_some_and(|t| !t.is_null()));
            !tools || (since_2025_11 && has("tools"))
        }
        _ => true,
    }
}

/// The client capability an input request needs, as the `requiredCapabilities`
/// object of a -32021 error (MCP 2026-07-28 basic/index), e.g.
/// `{"elicitation": {"url": {}}}`.
pub fn required_capability(method: &Method, params: Option<&Value>) -> Value {
    match method {
        Method::ElicitationCreate => {
            let mode = params.and_then(|p| p.get("mode")).and_then(Value::as_str);
            let mode = if mode == Some("url") { "url" } else { "form" };
            json!({ "elicitation": { mode: {} } })
        }
        Method::SamplingCreateMessage if params.is_some_and(|p| p.get("tools").is_some()) => {
            json!({"sampling": {"tools": {}}})
        }
        other => match other.client_capability() {
            Some(name) => json!({ name: {} }),
            None => json!({}),
        },
    }
}

/// The client capabilities declared to a 2026-07-28 backend for a host of
/// revision `host` that declared `caps`: only what the gateway can carry back to
/// that host (elicitation, sampling, roots; as `input_required` rounds for a
/// modern host, as requests on the call's stream for a legacy session), and only
/// in the forms [`may_ask`] allows its revision. Everything else (tasks,
/// experimental, extensions, `roots.listChanged`, which 2026-07-28 removed) is
/// left out, so the backend answers -32021 rather than asking for what would go
/// nowhere.
pub fn carried_capabilities(caps: &Value, host: ProtocolVersion) -> Value {
    let since_2025_11 = host >= ProtocolVersion::V2025_11_25;
    let mut out = Map::new();
    let declared = |name: &str| {
        caps.get(name)
            .filter(|c| !c.is_null() && host.knows_client_capability(name))
    };
    if let Some(e) = declared("elicitation") {
        let mut modes = Map::new();
        if e.get("form").is_some_and(|v| !v.is_null()) {
            modes.insert("form".into(), json!({}));
        }
        if since_2025_11 && e.get("url").is_some_and(|v| !v.is_null()) {
            modes.insert("url".into(), json!({}));
        }
        // `{}` is form mode alone; a host that declared only URL mode keeps it.
        let form_only = e.as_object().is_some_and(|o| o.is_empty());
        if form_only || !modes.is_empty() {
            out.insert("elicitation".into(), Value::Object(modes));
        }
    }
    if let Some(s) = declared("sampling") {
        let mut sampling = Map::new();
        if since_2025_11 {
            for key in ["tools", "context"] {
                if let Some(v) = s.get(key).filter(|v| !v.is_null()) {
                    sampling.insert(key.into(), v.clone());
                }
            }
        }
        out.insert("sampling".into(), Value::Object(sampling));
    }
    if declared("roots").is_some() {
        out.insert("roots".into(), json!({}));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V03: ProtocolVersion = ProtocolVersion::V2025_03_26;
    const V06: ProtocolVersion = ProtocolVersion::V2025_06_18;
    const V11: ProtocolVersion = ProtocolVersion::V2025_11_25;
    const MODERN: ProtocolVersion = ProtocolVersion::MODERN;

    fn raw(v: &Value) -> RawJson {
        RawJson::from_value(v).unwrap()
    }

    #[test]
    fn input_required_results_are_recognized_and_checked() {
        let ask = json!({"resultType": "input_required",
            "inputRequests": {"a": {"method": "roots/list"}}, "requestState": "s"});
        assert!(is_input_required(&raw(&ask), Marks::all()));
        let parsed = parse_input_required(&raw(&ask)).unwrap();
        assert_eq!(parsed.state.as_deref(), Some("s"));
        assert_eq!(parsed.requests.len(), 1);
        let state_only = json!({"resultType": "input_required", "requestState": "x"});
        assert!(
            parse_input_required(&raw(&state_only))
                .unwrap()
                .requests
                .is_empty()
        );
        let text = json!({"content": [{"type": "text", "text": "input_required"}]});
        assert!(!is_input_required(&raw(&text), Marks::all()));
        for bad in [
            json!({"resultType": "input_required"}),
            json!({"resultType": "input_required", "inputRequests": []}),
            json!({"resultType": "input_required", "requestState": 3}),
            json!({"resultType": "input_required", "inputRequests": {"a": {"method": "tools/call"}}}),
            json!({"resultType": "input_required", "inputRequests": {"a": {"method": "roots/list", "params": 1}}}),
        ] {
            assert!(parse_input_required(&raw(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn what_each_revision_may_be_asked() {
        let all =
            json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}});
        let url = json!({"mode": "url", "url": "https://x", "message": "m"});
        let tools = json!({"messages": [], "tools": [{"name": "t"}]});
        let e = Method::ElicitationCreate;
        let s = Method::SamplingCreateMessage;
        assert!(
            !may_ask(V03, &all, &e, None),
            "2025-03-26 has no elicitation"
        );
        assert!(may_ask(V06, &all, &e, None));
        assert!(
            !may_ask(V06, &all, &e, Some(&url)),
            "2025-06-18 has no URL mode"
        );
        assert!(may_ask(V11, &all, &e, Some(&url)));
        assert!(may_ask(MODERN, &all, &e, Some(&url)));
        assert!(!may_ask(V06, &all, &s, Some(&tools)));
        assert!(may_ask(V11, &all, &s, Some(&tools)));
        assert!(may_ask(V03, &all, &Method::RootsList, None));
        let form_only = json!({"elicitation": {}, "sampling": {}});
        assert!(may_ask(V11, &form_only, &e, None));
        assert!(!may_ask(V11, &form_only, &e, Some(&url)));
        assert!(!may_ask(V11, &form_only, &s, Some(&tools)));
        assert!(!may_ask(V11, &form_only, &Method::RootsList, None));
        let url_only = json!({"elicitation": {"url": {}}});
        assert!(!may_ask(V11, &url_only, &e, None));
        assert!(!may_ask(V11, &json!({}), &Method::ToolsCall, None));
    }

    #[test]
    fn carried_capabilities_follow_the_revision() {
        let all = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}, "context": {}},
            "roots": {"listChanged": true}, "tasks": {}, "experimental": {"x": {}}});
        assert_eq!(
            carried_capabilities(&all, V11),
            json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}, "context": {}}, "roots": {}})
        );
        assert_eq!(
            carried_capabilities(&all, V06),
            json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}})
        );
        assert_eq!(
            carried_capabilities(&all, V03),
            json!({"sampling": {}, "roots": {}})
        );
        assert_eq!(
            carried_capabilities(&json!({"elicitation": {}}), V06),
            json!({"elicitation": {}})
        );
        assert_eq!(
            carried_capabilities(&json!({"elicitation": {"url": {}}}), V06),
            json!({})
        );
        assert_eq!(carried_capabilities(&json!({}), MODERN), json!({}));
        assert_eq!(
            required_capability(&Method::ElicitationCreate, Some(&json!({"mode": "url"}))),
            json!({"elicitation": {"url": {}}})
        );
        assert_eq!(
            required_capability(&Method::RootsList, None),
            json!({"roots": {}})
        );
    }
}
