"""(d) Streamable HTTP transport rules at the gateway's endpoint, with raw HTTP (httpx2).

The backend (mcp-server-time) only makes the gateway start: every case here is decided by
the gateway's own transport layer (MCP 2025-11-25 basic/transports).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from support import Gateway, StartGateway, StdioCommand

pytestmark = pytest.mark.timeout(60)

PROTOCOL_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
JSON_HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json"}

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcpgate-e2e-raw", "version": "0.0.0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


@pytest.fixture
def gateway(start_gateway: StartGateway, time_server: StdioCommand) -> Gateway:
    return start_gateway({"time": time_server.backend()})


@pytest.fixture
def http() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=20.0, trust_env=False) as client:
        yield client


def messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, whether JSON or an SSE stream."""
    ctype = response.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        body = response.json()
        return body if isinstance(body, list) else [body]
    assert ctype.startswith("text/event-stream"), f"unexpected content-type {ctype!r}"
    out, data = [], []
    for line in response.text.splitlines() + [""]:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line == "" and data:
            text = "\n".join(data)
            data = []
            if text.strip():
                out.append(json.loads(text))
    return out


def session_headers(session_id: str) -> dict[str, str]:
    return {**JSON_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL_VERSION}


def open_session(http: httpx2.Client, url: str) -> str:
    """initialize + notifications/initialized; returns the session id."""
    r = http.post(url, json=INITIALIZE, headers=JSON_HEADERS)
    assert r.status_code == 200, (r.status_code, r.text)
    session_id = r.headers.get("mcp-session-id")
    assert session_id, f"no Mcp-Session-Id on the initialize response: {dict(r.headers)}"
    result = [m for m in messages(r) if m.get("id") == 1]
    assert result and "result" in result[0], r.text
    r = http.post(url, json=INITIALIZED, headers=session_headers(session_id))
    assert r.status_code == 202, (r.status_code, r.text)
    return session_id


def test_session_roundtrip(gateway: Gateway, http: httpx2.Client) -> None:
    session_id = open_session(http, gateway.url)
    r = http.post(gateway.url, json=TOOLS_LIST, headers=session_headers(session_id))
    assert r.status_code == 200, (r.status_code, r.text)
    [reply] = [m for m in messages(r) if m.get("id") == 2]
    assert {t["name"] for t in reply["result"]["tools"]} == {"time__get_current_time", "time__convert_time"}


def test_malformed_json_is_400_parse_error(gateway: Gateway, http: httpx2.Client) -> None:
    r = http.post(gateway.url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=JSON_HEADERS)
    assert r.status_code == 400, (r.status_code, r.text)
    body = r.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == -32700, body
    assert body.get("id") is None, body


def test_unknown_session_is_404(gateway: Gateway, http: httpx2.Client) -> None:
    r = http.post(gateway.url, json=TOOLS_LIST, headers=session_headers("no-such-session-00000000"))
    assert r.status_code == 404, (r.status_code, r.text)


def test_missing_session_is_400(gateway: Gateway, http: httpx2.Client) -> None:
    open_session(http, gateway.url)  # a session exists, but this request does not name it
    headers = {**JSON_HEADERS, "MCP-Protocol-Version": PROTOCOL_VERSION}
    r = http.post(gateway.url, json=TOOLS_LIST, headers=headers)
    assert r.status_code == 400, (r.status_code, r.text)


def test_wrong_accept_is_406(gateway: Gateway, http: httpx2.Client) -> None:
    r = http.post(gateway.url, json=INITIALIZE, headers={"Accept": "text/html", "Content-Type": "application/json"})
    assert r.status_code == 406, (r.status_code, r.text)


def test_wrong_content_type_is_415(gateway: Gateway, http: httpx2.Client) -> None:
    r = http.post(
        gateway.url, content=json.dumps(INITIALIZE).encode(), headers={"Accept": ACCEPT, "Content-Type": "text/plain"}
    )
    assert r.status_code == 415, (r.status_code, r.text)


def test_foreign_origin_is_403(gateway: Gateway, http: httpx2.Client) -> None:
    r = http.post(gateway.url, json=INITIALIZE, headers={**JSON_HEADERS, "Origin": "http://evil.example"})
    assert r.status_code == 403, (r.status_code, r.text)
    # The gateway's own origin is fine.
    r = http.post(gateway.url, json=INITIALIZE, headers={**JSON_HEADERS, "Origin": gateway.base})
    assert r.status_code == 200, (r.status_code, r.text)


def test_get_with_session_opens_event_stream(gateway: Gateway, http: httpx2.Client) -> None:
    session_id = open_session(http, gateway.url)
    headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL_VERSION}
    with http.stream("GET", gateway.url, headers=headers, timeout=httpx2.Timeout(10.0, read=2.0)) as r:
        assert r.status_code in (200, 405), (r.status_code, r.read())
        if r.status_code == 200:
            assert r.headers.get("content-type", "").startswith("text/event-stream"), dict(r.headers)


def test_delete_then_reuse_is_404(gateway: Gateway, http: httpx2.Client) -> None:
    session_id = open_session(http, gateway.url)
    r = http.delete(gateway.url, headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": PROTOCOL_VERSION})
    assert r.status_code in (200, 202, 204), (r.status_code, r.text)
    r = http.post(gateway.url, json=TOOLS_LIST, headers=session_headers(session_id))
    assert r.status_code == 404, (r.status_code, r.text)
