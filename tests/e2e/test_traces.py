"""OpenTelemetry traces (`[telemetry]`) with real components: the gateway exports over
OTLP/HTTP to tests/e2e/otlp_receiver.py (the official `opentelemetry-proto` decoder),
the backend is the fake stdio server logging every message it receives.

- a legacy `tools/call` with a host `traceparent` header: the SERVER span continues the
  host's trace (its parent is the host's span), a CLIENT span is its child, and the
  backend got `_meta.traceparent` naming that CLIENT span in the same trace; the access
  line carries `trace_id`; spans are flushed on SIGTERM;
- a 2026-07-28 `tools/call` whose `params._meta.traceparent` is the parent (a different
  HTTP `traceparent` becomes a link);
- an HTTP backend gets the CLIENT span's `traceparent` both as an HTTP header and in
  `params._meta`;
- with `[telemetry]` off nothing is exported, no `traceparent` is invented toward the
  backend, and a host's `_meta.traceparent` passes through unchanged (the chosen rule:
  when off, the gateway neither reads nor writes trace context).
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

import support
from support import ServerProcess, StartGateway

pytestmark = [pytest.mark.timeout(60)]

RECEIVER = Path(__file__).resolve().parent / "otlp_receiver.py"
BASE = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fake_stdio() -> str:
    path = support.mcpgate_bin().parent / "examples" / "mcpgate-fake-stdio"
    if not path.exists():
        pytest.fail(f"{path} not found: `cargo build --example mcpgate-fake-stdio`")
    return str(path)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The OTLP receiver on a free port: (endpoint URL, spans file)."""
    port = support.free_port()
    out = tmp_path / "spans.jsonl"
    proc = ServerProcess("otlp receiver", [sys.executable, str(RECEIVER), str(port), str(out)], port,
                         tmp_path / "receiver.log")
    try:
        proc.wait_for_port()
        yield f"http://127.0.0.1:{port}", out
    finally:
        proc.stop()


def config(backend_log: Path, endpoint: str | None, extra: str = "") -> str:
    fx = json.dumps(fake_stdio())
    text = f'[server]\nlisten = "127.0.0.1:8080"\n\n[backends.fx]\ntype = "stdio"\ncommand = {fx}\nargs = ["--log", {json.dumps(str(backend_log))}]\n'
    if endpoint:
        text += f'\n[telemetry]\notlp_endpoint = "{endpoint}"\nservice_name = "mcpgate-test"\n{extra}'
    return text


def post(url: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], list[dict[str, Any]]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    with LOOPBACK.open(req, timeout=15) as resp:
        raw = resp.read().decode()
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            msgs = [json.loads(l[5:]) for l in raw.splitlines() if l.startswith("data:") and l[5:].strip()]
        else:
            msgs = [json.loads(raw)] if raw.strip() else []
        return resp.status, dict(resp.headers), msgs


def session(url: str) -> dict[str, str]:
    status, headers, msgs = post(url, BASE, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert status == 200, msgs
    sid = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    h = {**BASE, "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY}
    assert post(url, h, {"jsonrpc": "2.0", "method": "notifications/initialized"})[0] == 202
    return h


def call_echo(url: str, headers: dict[str, str], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "fx__echo", "arguments": {"text": "hi"}}
    if meta:
        params["_meta"] = meta
    _, _, msgs = post(url, headers, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    answer = [m for m in msgs if m.get("id") == 7]
    assert answer and "result" in answer[0], msgs
    return answer[0]["result"]


def modern_headers() -> dict[str, str]:
    return {**BASE, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "fx__echo"}


MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
               "io.modelcontextprotocol/clientCapabilities": {}}


def new_parent() -> tuple[str, str, str]:
    trace, span = secrets.token_hex(16), secrets.token_hex(8)
    return trace, span, f"00-{trace}-{span}-01"


def backend_calls(log: Path) -> list[dict[str, Any]]:
    lines = [json.loads(l) for l in log.read_text().splitlines() if l.strip()]
    return [e["msg"] for e in lines if isinstance(e.get("msg"), dict) and e["msg"].get("method") == "tools/call"]


def spans(out: Path) -> list[dict[str, Any]]:
    return [json.loads(l) for l in out.read_text().splitlines() if l.strip()]


def test_a_host_traceparent_is_continued_to_the_backend(start_gateway: StartGateway, receiver, tmp_path: Path) -> None:
    endpoint, out = receiver
    backend_log = tmp_path / "fx.log"
    gw = start_gateway(config(backend_log, endpoint))
    trace, host_span, traceparent = new_parent()
    h = session(gw.url)
    result = call_echo(gw.url, {**h, "traceparent": traceparent, "tracestate": "vendor=x1"})
    assert not result.get("isError"), result
    # SIGTERM: the gateway drains, then flushes what its batch processor holds.
    assert gw.process.stop() == 0, gw.process.log_text()

    got = [s for s in spans(out) if s["trace_id"] == trace]
    server = [s for s in got if s["kind"] == "SPAN_KIND_SERVER"]
    assert len(server) == 1, got
    server = server[0]
    assert server["name"] == "tools/call fx__echo", server
    assert server["parent_span_id"] == host_span, server
    a = server["attributes"]
    assert a["mcp.method.name"] == "tools/call" and a["gen_ai.tool.name"] == "fx__echo", a
    assert a["jsonrpc.request.id"] == "7" and a["mcp.protocol.version"] == LEGACY, a
    assert a["mcpgate.backend"] == "fx" and a["mcp.session.id"], a
    assert "error.type" not in a and server["status"] != "STATUS_CODE_ERROR", server
    assert server["service"] == "mcpgate-test", server

    client = [s for s in got if s["kind"] == "SPAN_KIND_CLIENT"]
    assert len(client) == 1, got
    client = client[0]
    assert client["parent_span_id"] == server["span_id"], (client, server)
    assert client["name"] == "tools/call echo", client
    assert client["attributes"]["network.transport"] == "pipe", client

    calls = backend_calls(backend_log)
    assert len(calls) == 1, calls
    meta = calls[0]["params"]["_meta"]
    assert meta["traceparent"] == f"00-{trace}-{client['span_id']}-01", meta
    assert meta["tracestate"] == "vendor=x1", meta

    access = [l for l in gw.process.log_text().splitlines() if "mcpgate::access" in l and "tools/call" in l]
    assert len(access) == 1 and f'trace_id="{trace}"' in access[0], access


def test_a_failed_call_records_its_error(start_gateway: StartGateway, receiver, tmp_path: Path) -> None:
    """An unknown tool: the SERVER span has `error.type` and `rpc.response.status_code`
    -32602 and status ERROR; no upstream call, so no CLIENT span."""
    endpoint, out = receiver
    gw = start_gateway(config(tmp_path / "fx.log", endpoint))
    trace, _, traceparent = new_parent()
    h = session(gw.url)
    _, _, msgs = post(gw.url, {**h, "traceparent": traceparent},
                      {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "fx__nope"}})
    assert [m["error"]["code"] for m in msgs if m.get("id") == 8] == [-32602], msgs
    assert gw.process.stop() == 0, gw.process.log_text()
    got = [s for s in spans(out) if s["trace_id"] == trace]
    assert [s["kind"] for s in got] == ["SPAN_KIND_SERVER"], got
    a = got[0]["attributes"]
    assert a["error.type"] == "-32602" and a["rpc.response.status_code"] == "-32602", a
    assert got[0]["status"] == "STATUS_CODE_ERROR", got


def test_a_tool_error_result_is_a_tool_error(start_gateway: StartGateway, receiver, tmp_path: Path) -> None:
    """A result with `isError: true` (the fake asks for roots, which the host did not declare): `error.type` is `tool_error`."""
    endpoint, out = receiver
    gw = start_gateway(config(tmp_path / "fx.log", endpoint))
    trace, _, traceparent = new_parent()
    h = session(gw.url)
    _, _, msgs = post(gw.url, {**h, "traceparent": traceparent},
                      {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "fx__ask_roots", "arguments": {}}})
    assert [m["result"].get("isError") for m in msgs if m.get("id") == 8] == [True], msgs
    assert gw.process.stop() == 0, gw.process.log_text()
    server = [s for s in spans(out) if s["trace_id"] == trace and s["kind"] == "SPAN_KIND_SERVER"]
    assert len(server) == 1 and server[0]["attributes"]["error.type"] == "tool_error", server
    assert server[0]["status"] == "STATUS_CODE_ERROR", server


def test_sampling_ratio_zero_keeps_only_traces_the_host_sampled(start_gateway: StartGateway, receiver,
                                                                 tmp_path: Path) -> None:
    """Parent-based ratio 0: a trace the gateway starts is not exported (its context still
    goes to the backend, flagged not sampled); one the host sampled is."""
    endpoint, out = receiver
    backend_log = tmp_path / "fx.log"
    gw = start_gateway(config(backend_log, endpoint, "sampling_ratio = 0.0\n"))
    h = session(gw.url)
    call_echo(gw.url, h)
    trace, host_span, traceparent = new_parent()
    call_echo(gw.url, {**h, "traceparent": traceparent})
    assert gw.process.stop() == 0, gw.process.log_text()
    got = spans(out)
    assert got and {s["trace_id"] for s in got} == {trace}, got
    first, second = (c["params"]["_meta"]["traceparent"] for c in backend_calls(backend_log))
    assert first.endswith("-00") and first.split("-")[1] != trace, first
    assert second.split("-")[1] == trace and second.endswith("-01"), second


def test_a_modern_request_meta_traceparent_is_the_parent(start_gateway: StartGateway, receiver, tmp_path: Path) -> None:
    endpoint, out = receiver
    backend_log = tmp_path / "fx.log"
    gw = start_gateway(config(backend_log, endpoint))
    trace, meta_span, traceparent = new_parent()
    http_trace, http_span, http_parent = new_parent()
    result = call_echo(gw.url, {**modern_headers(), "traceparent": http_parent},
                       {**MODERN_META, "traceparent": traceparent, "progressToken": "p1"})
    assert result.get("resultType") == "complete", result
    assert gw.process.stop() == 0, gw.process.log_text()

    server = [s for s in spans(out) if s["kind"] == "SPAN_KIND_SERVER" and s["trace_id"] == trace]
    assert len(server) == 1, spans(out)
    assert server[0]["parent_span_id"] == meta_span, server
    assert server[0]["attributes"]["mcp.protocol.version"] == MODERN, server
    assert {"trace_id": http_trace, "span_id": http_span} in server[0]["links"], server
    client = [s for s in spans(out) if s["kind"] == "SPAN_KIND_CLIENT" and s["parent_span_id"] == server[0]["span_id"]]
    assert len(client) == 1, spans(out)
    meta = backend_calls(backend_log)[0]["params"]["_meta"]
    assert meta["traceparent"] == f"00-{trace}-{client[0]['span_id']}-01", meta
    assert meta.get("progressToken") is not None, meta  # the host's other keys stay


def test_off_exports_nothing_and_invents_no_traceparent(start_gateway: StartGateway, receiver, tmp_path: Path) -> None:
    endpoint, out = receiver
    backend_log = tmp_path / "fx.log"
    gw = start_gateway(config(backend_log, None))
    _, _, header_parent = new_parent()
    h = session(gw.url)
    call_echo(gw.url, {**h, "traceparent": header_parent})
    _, _, meta_parent = new_parent()
    call_echo(gw.url, {**modern_headers(), "traceparent": header_parent}, {**MODERN_META, "traceparent": meta_parent})
    time.sleep(0.5)
    assert gw.process.stop() == 0, gw.process.log_text()

    calls = backend_calls(backend_log)
    assert len(calls) == 2, calls
    assert "traceparent" not in (calls[0]["params"].get("_meta") or {}), calls[0]
    assert calls[1]["params"]["_meta"]["traceparent"] == meta_parent, calls[1]
    assert spans(out) == []
    log = gw.process.log_text()
    assert "trace_id" not in log and "exporting traces" not in log, log


class _Backend(BaseHTTPRequestHandler):
    """A minimal Streamable HTTP MCP server (JSON answers) that records every POST."""

    seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        type(self).seen.append(({k.lower(): v for k, v in self.headers.items()}, msg))
        if "id" not in msg:
            self.send_response(202)
            self.end_headers()
            return
        method = msg.get("method")
        if method == "initialize":
            result: Any = {"protocolVersion": LEGACY, "capabilities": {"tools": {}},
                           "serverInfo": {"name": "rec", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.send_error(405)

    def do_DELETE(self) -> None:  # noqa: N802
        self.send_error(405)

    def log_message(self, fmt: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_backend() -> Iterator[tuple[str, list[tuple[dict[str, str], dict[str, Any]]]]]:
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []
    handler = type("Backend", (_Backend,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp", seen
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_backend_gets_the_trace_in_header_and_meta(start_gateway: StartGateway, receiver, http_backend) -> None:
    endpoint, out = receiver
    url, seen = http_backend
    text = (f'[server]\nlisten = "127.0.0.1:8080"\n\n[backends.rec]\ntype = "http"\nurl = "{url}"\n'
            f'\n[telemetry]\notlp_endpoint = "{endpoint}"\n')
    gw = start_gateway(text)
    trace, host_span, traceparent = new_parent()
    h = session(gw.url)
    params = {"name": "rec__echo", "arguments": {}}
    _, _, msgs = post(gw.url, {**h, "traceparent": traceparent},
                      {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
    assert any(m.get("id") == 9 and "result" in m for m in msgs), msgs
    assert gw.process.stop() == 0, gw.process.log_text()

    client = [s for s in spans(out) if s["kind"] == "SPAN_KIND_CLIENT" and s["trace_id"] == trace]
    assert len(client) == 1, spans(out)
    assert client[0]["attributes"]["network.transport"] == "tcp", client
    want = f"00-{trace}-{client[0]['span_id']}-01"
    calls = [(hd, m) for hd, m in seen if m.get("method") == "tools/call"]
    assert len(calls) == 1, seen
    headers, msg = calls[0]
    assert headers.get("traceparent") == want, headers
    assert msg["params"]["_meta"]["traceparent"] == want, msg
    # Catalogue traffic is not part of any host request: no trace context on it.
    listed = [hd for hd, m in seen if m.get("method") == "tools/list"]
    assert listed and all("traceparent" not in hd for hd in listed), listed
