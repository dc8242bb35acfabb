//! `Mcp-Param-{Name}` headers: a tool's designated arguments mirrored into HTTP
//! headers so intermediaries can route without reading the body (MCP 2026-07-28
//! basic/transports/streamable-http, "Custom Headers from Tool Parameters"; the
//! `x-mcp-header` schema extension of server/tools).
//!
//! A tool's `inputSchema` names a property's header with `"x-mcp-header": "Region"`.
//! The annotation is valid when its value is an RFC 9110 token (§5.6.2), unique
//! within the tool ignoring case, on a property of a primitive type, and the
//! property is reachable from the root through `properties` keys only (not under
//! `items`, a composition keyword, a conditional, `$defs` or a `$ref`). A client
//! drops a tool whose annotations are invalid; a server that reads the body
//! refuses a request whose headers disagree with it (HTTP 400, JSON-RPC `-32020`).
//!
//! `number` is accepted next to the spec's `string`, `integer` and `boolean`: the
//! conformance referee annotates `number` parameters and the TypeScript SDK mirrors
//! them, and a gateway that dropped those tools would hide them from every host.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine;
use serde_json::{Map, Value};

use super::MCP_PARAM_PREFIX;
use super::metadata::decode_header_value;

/// The schema keyword that designates a header.
pub const ANNOTATION: &str = "x-mcp-header";

/// Schema keywords whose values are data, not subschemas: an `x-mcp-header` key
/// inside them is not an annotation.
const DATA_KEYWORDS: [&str; 5] = ["const", "enum", "default", "examples", ANNOTATION];

/// One annotated property: the header's name (as written in the schema, without
/// the `Mcp-Param-` prefix) and the `properties` path from the schema root to the
/// property, which is also the path of its value inside `arguments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The name after `Mcp-Param-`, e.g. `Region`.
    pub name: String,
    /// Property names from the root, e.g. `["location", "region"]`.
    pub path: Vec<String>,
}

/// A tool's annotations, in schema order. Empty for the vast majority of tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamHeaders(Vec<ParamHeader>);

impl ParamHeaders {
    /// Reads the annotations of a tool's `inputSchema`. `Err` says which rule an
    /// annotation breaks (the tool is then invalid for 2026-07-28 clients).
    pub fn from_schema(schema: &Value) -> Result<ParamHeaders, String> {
        let mut found = Vec::new();
        scan(schema, true, &mut Vec::new(), &mut found)?;
        for (i, a) in found.iter().enumerate() {
            if found[..i]
                .iter()
                .any(|b: &ParamHeader| b.name.eq_ignore_ascii_case(&a.name))
            {
                return Err(format!("{ANNOTATION} {:?} is used twice", a.name));
            }
        }
        Ok(ParamHeaders(found))
    }

    /// Whether the tool has no annotation (nothing to check or mirror).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The annotations.
    pub fn iter(&self) -> impl Iterator<Item = &ParamHeader> {
        self.0.iter()
    }

    /// Checks a request's `Mcp-Param-*` headers against its `arguments`: every
    /// annotated argument with a non-null value needs its header, once, equal after
    /// `=?base64?…?=` decoding (numbers compared numerically). A header whose
    /// argument is null or absent, and headers no annotation names, are ignored.
    /// `Err` is the `-32020` message.
    pub fn check(&self, h: &HeaderMap, arguments: Option<&Value>) -> Result<(), String> {
        for a in &self.0 {
            let Some(value) = lookup(arguments, &a.path) else {
                continue;
            };
            let header = format!("{MCP_PARAM_PREFIX}{}", a.name.to_ascii_lowercase());
            let mut values = h.get_all(header.as_str()).iter();
            let Some(raw) = values.next() else {
                return Err(format!("Mcp-Param-{} is required", a.name));
            };
            if values.next().is_some() {
                return Err(format!("more than one Mcp-Param-{} header", a.name));
            }
            let text = raw
                .to_str()
                .map_err(|_| format!("Mcp-Param-{} is not visible ASCII", a.name))?;
            let decoded = decode_header_value(text.trim()).ok_or_else(|| {
                format!("Mcp-Param-{} has a malformed =?base64?…?= value", a.name)
            })?;
            if !agrees(&decoded, value) {
                return Err(format!(
                    "Mcp-Param-{} {decoded:?} but the argument is {value}",
                    a.name
                ));
            }
        }
        Ok(())
    }

    /// The headers a client sends for `arguments`: one per annotated argument with a
    /// primitive non-null value, encoded by [`encode_header_value`].
    pub fn mirror(&self, arguments: Option<&Value>) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::new();
        for a in &self.0 {
            let text = match lookup(arguments, &a.path) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                _ => continue,
            };
            let name = format!("{MCP_PARAM_PREFIX}{}", a.name.to_ascii_lowercase());
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&encode_header_value(&text)),
            ) else {
                continue;
            };
            out.push((name, value));
        }
        out
    }
}

/// Encodes a header value: as is when it is printable ASCII without leading or
/// trailing whitespace and does not itself look like the sentinel, otherwise
/// `=?base64?{standard base64 of the UTF-8}?=` (MCP 2026-07-28 streamable-http,
/// "Value Encoding").
pub fn encode_header_value(v: &str) -> String {
    let plain = v.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && v.trim() == v
        && !(v.starts_with("=?base64?") && v.ends_with("?="));
    if plain {
        v.to_owned()
    } else {
        let b64 = base64::engine::general_purpose::STANDARD.encode(v);
        format!("=?base64?{b64}?=")
    }
}

/// Walks a schema. `reachable`: this subschema is the root or reached through
/// `properties` keys only; `path` is that chain.
fn scan(
    schema: &Value,
    reachable: bool,
    path: &mut Vec<String>,
    found: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    match schema {
        Value::Array(items) => {
            for item in items {
                scan(item, false, path, found)?;
            }
            Ok(())
        }
        Value::Object(obj) => {
            if let Some(name) = obj.get(ANNOTATION) {
                found.push(annotation(obj, name, reachable, path)?);
            }
            for (key, sub) in obj {
                if DATA_KEYWORDS.contains(&key.as_str()) {
                    continue;
                }
                if key == "properties"
                    && let Value::Object(props) = sub
                {
                    for (prop, sub) in props {
                        path.push(prop.clone());
                        scan(sub, reachable, path, found)?;
                        path.pop();
                    }
                } else {
                    scan(sub, false, path, found)?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Validates one annotation found on `obj` at `path`.
fn annotation(
    obj: &Map<String, Value>,
    name: &Value,
    reachable: bool,
    path: &[String],
) -> Result<ParamHeader, String> {
    let Some(name) = name.as_str() else {
        return Err(format!("{ANNOTATION} must be a string, not {name}"));
    };
    if !reachable || path.is_empty() {
        return Err(format!(
            "{ANNOTATION} {name:?} is not on a property reached through properties only"
        ));
    }
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(format!("{ANNOTATION} {name:?} is not an HTTP token"));
    }
    if !primitive(obj.get("type")) {
        return Err(format!(
            "{ANNOTATION} {name:?} is on a property that is not a string, integer, number or boolean"
        ));
    }
    Ok(ParamHeader {
        name: name.to_owned(),
        path: path.to_vec(),
    })
}

/// `type` is one primitive, or one primitive and `"null"`.
fn primitive(ty: Option<&Value>) -> bool {
    const OK: [&str; 4] = ["string", "integer", "number", "boolean"];
    match ty {
        Some(Value::String(t)) => OK.contains(&t.as_str()),
        Some(Value::Array(ts)) => {
            let names: Vec<_> = ts.iter().filter_map(Value::as_str).collect();
            names.len() == ts.len()
                && names.iter().filter(|t| OK.contains(t)).count() == 1
                && names.iter().all(|t| OK.contains(t) || *t == "null")
        }
        _ => false,
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The non-null value at `path` inside `arguments`.
fn lookup<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut v = arguments?;
    for key in path {
        v = v.get(key)?;
    }
    (!v.is_null()).then_some(v)
}

/// Whether a decoded header value says the same as the argument: strings equal,
/// booleans as `true`/`false`, numbers numerically (`42` and `42.0` agree).
fn agrees(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_i64(), header.parse::<i64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => matches!((n.as_f64(), header.parse::<f64>()), (Some(a), Ok(b)) if a == b),
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(props: Value) -> Value {
        let mut schema = json!({"type": "object"});
        schema["properties"] = props;
        schema
    }

    #[test]
    fn reads_annotations_on_properties_only() {
        let schema = tool(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "loc": {"type": "object", "properties": {
                "zone": {"type": ["integer", "null"], "x-mcp-header": "Zone"}}},
            "query": {"type": "string"}
        }));
        let p = ParamHeaders::from_schema(&schema).unwrap();
        let names: Vec<_> = p
            .iter()
            .map(|a| (a.name.as_str(), a.path.join(".")))
            .collect();
        assert_eq!(
            names,
            [("Region", "region".into()), ("Zone", "loc.zone".into())]
        );
        assert!(
            ParamHeaders::from_schema(&tool(json!({})))
                .unwrap()
                .is_empty()
        );
        // A property named like the keyword, and the keyword inside data, are not annotations.
        let odd = tool(json!({"x-mcp-header": {"type": "string", "default": {"x-mcp-header": 1}}}));
        assert!(ParamHeaders::from_schema(&odd).unwrap().is_empty());
    }

    #[test]
    fn refuses_invalid_annotations() {
        let bad = [
            tool(json!({"a": {"type": "string", "x-mcp-header": ""}})),
            tool(json!({"a": {"type": "string", "x-mcp-header": "Has Space"}})),
            tool(json!({"a": {"type": "string", "x-mcp-header": 7}})),
            tool(json!({"a": {"type": "object", "x-mcp-header": "A"}})),
            tool(json!({"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}})),
            tool(json!({"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}})),
            tool(json!({"a": {"type": "string", "x-mcp-header": "A"},
                        "b": {"type": "string", "x-mcp-header": "a"}})),
            json!({"type": "string", "x-mcp-header": "Root"}),
            json!({"type": "object", "$defs": {"d": {"type": "string", "x-mcp-header": "D"}}}),
        ];
        for schema in bad {
            assert!(ParamHeaders::from_schema(&schema).is_err(), "{schema}");
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn headers_must_agree_with_annotated_arguments() {
        let p = ParamHeaders::from_schema(&tool(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "on": {"type": "boolean", "x-mcp-header": "On"}
        })))
        .unwrap();
        let args = json!({"region": "eu-west", "n": 42, "on": true});
        let ok = headers(&[
            ("mcp-param-region", "eu-west"),
            ("Mcp-Param-N", "42.0"),
            ("mcp-param-on", "true"),
        ]);
        assert_eq!(p.check(&ok, Some(&args)), Ok(()));
        let missing = headers(&[("mcp-param-n", "42"), ("mcp-param-on", "true")]);
        assert!(
            p.check(&missing, Some(&args))
                .unwrap_err()
                .contains("Region is required")
        );
        let wrong = headers(&[
            ("mcp-param-region", "us"),
            ("mcp-param-n", "42"),
            ("mcp-param-on", "true"),
        ]);
        assert!(p.check(&wrong, Some(&args)).unwrap_err().contains("\"us\""));
        let twice = headers(&[
            ("mcp-param-region", "eu-west"),
            ("mcp-param-region", "eu-west"),
            ("mcp-param-n", "42"),
            ("mcp-param-on", "true"),
        ]);
        assert!(
            p.check(&twice, Some(&args))
                .unwrap_err()
                .contains("more than one")
        );
        // Null or absent arguments expect no header; unknown headers are ignored.
        let sparse = json!({"region": null});
        assert_eq!(
            p.check(&headers(&[("mcp-param-other", "x")]), Some(&sparse)),
            Ok(())
        );
        assert_eq!(p.check(&HeaderMap::new(), None), Ok(()));
    }

    #[test]
    fn mirrors_and_encodes_values() {
        let p = ParamHeaders::from_schema(&tool(json!({
            "city": {"type": "string", "x-mcp-header": "City"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "gone": {"type": "string", "x-mcp-header": "Gone"}
        })))
        .unwrap();
        let args = json!({"city": "Zürich", "n": 7, "gone": null});
        let mirrored = p.mirror(Some(&args));
        let h: HeaderMap = mirrored.into_iter().collect();
        assert_eq!(h.len(), 2);
        assert_eq!(h["mcp-param-n"], "7");
        assert_eq!(h["mcp-param-city"], encode_header_value("Zürich"));
        assert_eq!(p.check(&h, Some(&args)), Ok(()));
        assert_eq!(encode_header_value("plain value"), "plain value");
        assert!(encode_header_value(" padded").starts_with("=?base64?"));
        assert!(encode_header_value("=?base64?abc?=").starts_with("=?base64?"));
        assert_ne!(encode_header_value("=?base64?abc?="), "=?base64?abc?=");
    }
}
