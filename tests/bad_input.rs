//! Bad host input gets the spec's error, never a panic or a dropped session:
//! malformed JSON, wrong `jsonrpc`, missing/duplicate/null ids, unknown methods,
//! unknown tools, prompts and resources.

mod common;

use common::{FX, FX_LOGGED, TestGateway, text_of};
use serde_json::{Value, json};

#[tokio::test]
async fn malformed_envelopes_are_400_with_the_json_rpc_code() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let cases: [(&str, i64, Value); 7] = [
        ("{not json", -32700, Value::Null),
        (
            r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
            -32600,
            json!(5),
        ),
        (r#"{"id":6,"method":"ping"}"#, -32600, json!(6)),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","result":{}}"#, -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
    ];
    for (body, code, id) in cases {
        let r = s.post(&[], body).await;
        assert_eq!(r.status, 400, "{body}");
        let v = r.json();
        assert_eq!(v["error"]["code"], code, "{body} → {v}");
        assert_eq!(
            v.get("id").cloned().unwrap_or(Value::Null),
            id,
            "{body} → {v}"
        );
    }
    let r = s.call_tool("fx__echo", json!({"text": "still here"})).await;
    assert_eq!(text_of(&r.response), "still here");
}

#[tokio::test]
async fn unknown_method_tool_prompt_and_resource_get_spec_errors() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let r = s.request_id(json!("m1"), "no/such/method", json!({})).await;
    assert_eq!(r.error_code(), Some(-32601));
    assert_eq!(r.response["id"], "m1");

    let a = s.call_tool("fx__nope", json!({})).await;
    let b = s.call_tool("zz__echo", json!({})).await;
    assert_eq!(a.error_code(), Some(-32602), "{}", a.response);
    assert_eq!(b.error_code(), Some(-32602), "{}", b.response);
    let ma = a.response["error"]["message"].as_str().unwrap();
    let mb = b.response["error"]["message"].as_str().unwrap();
    assert_eq!(
        ma.replace("fx__nope", "N"),
        mb.replace("zz__echo", "N"),
        "an unknown backend and an unknown tool look the same"
    );
    assert!(!ma.contains("fx__echo"), "no hint about other tools: {ma}");

    let r = s
        .request("prompts/get", json!({"name": "fx__nope", "arguments": {}}))
        .await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.response);
    let r = s
        .request("resources/read", json!({"uri": "file:///nope"}))
        .await;
    assert_eq!(r.error_code(), Some(-32002), "{}", r.response);
    let r = s.request("tools/call", json!({"arguments": {}})).await;
    assert_eq!(r.error_code(), Some(-32602), "missing name: {}", r.response);
    let r = s.call_tool("fx__echo", json!({"text": "ok"})).await;
    assert_eq!(text_of(&r.response), "ok");
}

/// Numbers in a host's arguments reach the backend as the same IEEE doubles,
/// however many digits the host wrote (a fuzzer found a 112-digit literal
/// forwarded one unit in the last place off).
#[tokio::test]
async fn numbers_in_arguments_reach_the_backend_unchanged() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let long = format!("{}.5", "2".repeat(112));
    let literals = [
        long.as_str(),
        "0.30000000000000004",
        "1.7976931348623157e308",
        "4.9e-324",
        "2.2250738585072011e-308",
        "9007199254740993",
        "-0.0",
        "123456789.12345678",
    ];
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"fx__echo","arguments":{{"text":"n","n":[{}]}}}}}}"#,
        literals.join(",")
    );
    let r = s.post(&[], body).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(text_of(&v), "n", "{v}");
    let call = &common::logged_calls(&log, "echo")[0];
    let seen = call["msg"]["params"]["arguments"]["n"].as_array().unwrap();
    assert_eq!(seen.len(), literals.len());
    for (lit, got) in literals.iter().zip(seen) {
        let want: f64 = lit.parse().unwrap();
        let got = got.as_f64().unwrap();
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{lit} arrived as {got:e}, want {want:e}"
        );
    }
}

/// `initialize` params missing or of the wrong JSON type are -32602 naming the
/// field, and no session is opened (MCP 2025-11-25 basic/lifecycle and schema
/// `InitializeRequestParams`: `protocolVersion` a string, `capabilities` a
/// `ClientCapabilities` object, `clientInfo` an `Implementation` with string
/// `name` and `version`, all required; the official TypeScript and Python SDK
/// servers refuse such an `initialize` too).
#[tokio::test]
async fn initialize_params_of_the_wrong_type_are_invalid_params_naming_the_field() {
    let gw = TestGateway::start(FX).await;
    let c = gw.client();
    let good = || {
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "n", "version": "1"}})
    };
    let cases: [(&str, Value, &str); 11] = [
        ("capabilities", json!("x"), "params.capabilities"),
        // Absent (`Value::Null` below removes the member): required by the schema.
        ("capabilities", Value::Null, "params.capabilities"),
        ("clientInfo", Value::Null, "params.clientInfo"),
        (
            "clientInfo",
            json!({"version": "1"}),
            "params.clientInfo.name",
        ),
        (
            "clientInfo",
            json!({"name": "n"}),
            "params.clientInfo.version",
        ),
        ("capabilities", json!([]), "params.capabilities"),
        ("clientInfo", json!("x"), "params.clientInfo"),
        (
            "clientInfo",
            json!({"name": 5, "version": "1"}),
            "params.clientInfo.name",
        ),
        (
            "clientInfo",
            json!({"name": "n", "version": 1}),
            "params.clientInfo.version",
        ),
        ("protocolVersion", json!(20251125), "params.protocolVersion"),
        ("protocolVersion", Value::Null, "params.protocolVersion"),
    ];
    for (field, value, named) in cases {
        let mut params = good();
        if value.is_null() {
            params.as_object_mut().unwrap().remove(field);
        } else {
            params[field] = value.clone();
        }
        let body = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": params});
        let r = c.post(&[], body.to_string()).await;
        let v = r.json();
        assert_eq!(v["error"]["code"], -32602, "{field}={value} → {v}");
        assert_eq!(v["id"], "i", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{field}={value}: {message}");
        assert!(
            r.header("mcp-session-id").is_none(),
            "no session for {field}={value}"
        );
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": good()});
    let r = c.post(&[], body.to_string()).await;
    assert!(r.json()["result"]["protocolVersion"].is_string());
    assert!(r.header("mcp-session-id").is_some());
}

/// `initialize` without an id is a notification, which gets no answer: 400 with
/// -32600 saying that it needs an id (the transport's answer to a POST that is
/// not a valid message, as for every other malformed first message), never
/// "Mcp-Session-Id header is required".
#[tokio::test]
async fn initialize_as_a_notification_is_told_it_needs_an_id() {
    let gw = TestGateway::start(FX).await;
    let body = json!({"jsonrpc": "2.0", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "n", "version": "1"}}})
    .to_string();
    let s = gw.session().await;
    for (who, c) in [("no session", gw.client()), ("a session", s)] {
        let r = c.post(&[], body.clone()).await;
        assert_eq!(r.status, 400, "{who}: {r:?}");
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "{who}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("initialize") && message.contains("id"),
            "{who}: {message}"
        );
        assert!(v.get("id").is_none_or(Value::is_null), "{who}: {v}");
        assert!(r.header("mcp-session-id").is_none(), "{who}");
    }
}

/// JSON-RPC 2.0 ids are any number without a fractional part (MCP: "string or
/// integer"); one beyond 64 bits comes back byte for byte, on a JSON answer, an
/// error and an SSE stream alike (other spellings of integers: below).
#[tokio::test]
async fn ids_beyond_64_bits_come_back_byte_identical() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let ids = [
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
        "18446744073709551615",
        "9223372036854775808",
    ];
    for id in ids {
        let bodies = [
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fx__echo","arguments":{{"text":"e"}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fx__nope","arguments":{{}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fx__delay_echo","arguments":{{"ms":600,"tag":"slow"}}}}}}"#
            ),
        ];
        for body in bodies {
            let r = s.post(&[], body.clone()).await;
            assert_eq!(r.status, 200, "{body}: {r:?}");
            let text = String::from_utf8_lossy(&r.body);
            assert!(text.contains(&format!(r#""id":{id}"#)), "{body} → {text}");
            assert!(
                r.json().get("error").is_none() || body.contains("fx__nope"),
                "{text}"
            );
        }
    }
    // Still not ids: numbers with a fractional value, other types.
    for id in ["1.5", "1e-3", "12.55e1", "true", "[1]"] {
        let r = s
            .post(
                &[],
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            )
            .await;
        assert_eq!(r.status, 400, "{id}");
        assert_eq!(r.json()["error"]["code"], -32600, "{id}");
    }
}

/// An integer id is echoed as it was written, as ids beyond 64 bits are: `-0`
/// is not `0`, and `1.0`, `1e3` (integers by value, MCP's schema: `integer`)
/// come back as `1.0`, `1e3`, on a JSON answer, an error and an SSE stream alike.
#[tokio::test]
async fn integer_ids_of_any_spelling_come_back_as_written() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for id in ["-0", "1.0", "1e3", "1E+3", "-0.0", "12.50e1"] {
        let bodies = [
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fx__nope","arguments":{{}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fx__delay_echo","arguments":{{"ms":600,"tag":"slow"}}}}}}"#
            ),
        ];
        for body in bodies {
            let r = s.post(&[], body.clone()).await;
            assert_eq!(r.status, 200, "{body}: {r:?}");
            let text = String::from_utf8_lossy(&r.body);
            assert!(text.contains(&format!(r#""id":{id}"#)), "{body} → {text}");
        }
    }
}

/// A message with both `result` and `error` is told so (-32600), not that it
/// lacks them.
#[tokio::test]
async fn a_response_with_both_result_and_error_is_told_what_is_wrong() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let r = s
        .post(
            &[],
            r#"{"jsonrpc":"2.0","id":3,"result":{},"error":{"code":1,"message":"x"}}"#,
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let body = r.json();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("both result and error"), "{body}");
    let r = s.post(&[], r#"{"jsonrpc":"2.0","id":3}"#).await;
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("a method, a result or an error"),
        "{message}"
    );
}

/// `params._meta` that is not an object is -32602 naming it, on every method
/// a session routes, and never reaches a backend (it was forwarded, and the
/// backend's confused answer came back: "Server not initialized").
#[tokio::test]
async fn a_meta_that_is_not_an_object_is_invalid_params_and_not_forwarded() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    for meta in [json!("x"), json!([]), json!(5), Value::Null] {
        let asks = [
            (
                "tools/call",
                json!({"name": "fx__echo", "arguments": {"text": "t"}, "_meta": meta}),
            ),
            ("prompts/get", json!({"name": "fx__greet", "_meta": meta})),
            ("tools/list", json!({"_meta": meta})),
        ];
        for (method, params) in asks {
            let r = s.request(method, params).await;
            assert_eq!(
                r.error_code(),
                Some(-32602),
                "{method} {meta}: {}",
                r.response
            );
            let message = r.response["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("_meta"), "{message}");
        }
    }
    assert!(
        common::logged_calls(&log, "echo").is_empty(),
        "not forwarded"
    );
    let ok = s.call_tool("fx__echo", json!({"text": "still fine"})).await;
    assert_eq!(text_of(&ok.response), "still fine");
}

/// `_meta.progressToken` is a string or an integer (MCP 2025-11-25
/// basic/utilities/progress: "MUST be a string or integer value"); any other
/// JSON type is -32602 naming it, and the request is not forwarded.
#[tokio::test]
async fn a_progress_token_neither_string_nor_integer_is_invalid_params() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    for token in [
        json!(1.5),
        json!(true),
        Value::Null,
        json!({}),
        json!(["t"]),
    ] {
        let params = json!({"name": "fx__echo", "arguments": {"text": "t"},
                            "_meta": {"progressToken": token}});
        let r = s.request("tools/call", params).await;
        assert_eq!(r.error_code(), Some(-32602), "{token}: {}", r.response);
        let message = r.response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("progressToken"), "{token}: {message}");
    }
    assert!(
        common::logged_calls(&log, "echo").is_empty(),
        "not forwarded"
    );
    for token in [json!("tok"), json!(7)] {
        let params = json!({"name": "fx__echo", "arguments": {"text": "ok"},
                            "_meta": {"progressToken": token}});
        let r = s.request("tools/call", params).await;
        assert_eq!(text_of(&r.response), "ok", "{token}: {}", r.response);
    }
}

/// `tasks/get`, `tasks/result` and `tasks/cancel` name their task with a string
/// `taskId` (MCP 2025-11-25 schema, `GetTaskRequest` and its kin): any other type,
/// or none, is -32602 "params.taskId must be a string", not "Unknown task: ".
#[tokio::test]
async fn a_task_id_that_is_not_a_string_is_invalid_params() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        for params in [json!({"taskId": 5}), json!({"taskId": null}), json!({})] {
            let r = s.request(method, params.clone()).await;
            assert_eq!(
                r.error_code(),
                Some(-32602),
                "{method} {params}: {}",
                r.response
            );
            let message = r.response["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("taskId must be a string"),
                "{method} {params}: {message}"
            );
        }
    }
}
