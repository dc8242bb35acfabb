"""Prometheus metrics: the documented series with exact counts, and bounded labels.

The real `mcpgate serve` with the fake stdio backend runs a scripted workload over raw HTTP
(so every request is counted exactly once); `/metrics` is parsed with prometheus-client's
text parser and the documented series are checked with their exact counts. Then a client
sends 1,000 distinct unknown method names and 1,000 unknown tool names: the number of
series does not grow (labels come from bounded sets only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

import support
from support import StartGateway

pytestmark = pytest.mark.timeout(90)

ACCEPT = "application/json, text/event-stream"


def fake_stdio() -> str:
    # A cargo example (tests/support/fake_stdio.rs), not a product binary.
    path = support.mcpgate_bin().parent / "examples" / "mcpgate-fake-stdio"
    if not path.exists():
        pytest.fail(f"{path} not found: `cargo build --example mcpgate-fake-stdio`")
    return str(path)


def config(metrics_port: int) -> str:
    fake = json.dumps(fake_stdio())
    return f"""
[server]
listen = "127.0.0.1:8080"
metrics_listen = "127.0.0.1:{metrics_port}"

[backends.fx]
type = "stdio"
command = {fake}
timeout = "400ms"

[backends.crashy]
type = "stdio"
command = {fake}
args = ["--exit-after-calls", "0"]

[backends.dead]
type = "stdio"
command = {fake}
args = ["--crash-on-start"]
"""


class Host:
    """A raw MCP host: one session, every message a POST."""

    def __init__(self, client: httpx2.Client, url: str):
        self.client = client
        self.url = url
        self.session: str | None = None
        self.next_id = 1

    def headers(self) -> dict[str, str]:
        h = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session:
            h["Mcp-Session-Id"] = self.session
            h["MCP-Protocol-Version"] = "2025-11-25"
        return h

    def post(self, msg: dict[str, Any], headers: dict[str, str] | None = None) -> httpx2.Response:
        return self.client.post(self.url, json=msg, headers={**self.headers(), **(headers or {})})

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        self.next_id += 1
        if params is not None:
            msg["params"] = params
        r = self.post(msg)
        assert r.status_code == 200, (method, r.status_code, r.text)
        if r.headers["content-type"].startswith("text/event-stream"):
            answers = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            return [a for a in answers if a.get("id") == msg["id"]][-1]
        return r.json()

    def initialize(self) -> None:
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "metrics", "version": "0"}}})
        assert r.status_code == 200, r.text
        self.session = r.headers["mcp-session-id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202


class Scrape:
    """One parsed /metrics document."""

    def __init__(self, text: str):
        self.samples: list[Any] = []
        self.families = {}
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family
            self.samples.extend(family.samples)

    def value(self, name: str, **labels: str) -> float | None:
        hits = [s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        return sum(hits) if hits else None

    def series(self) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        """Every series a client's traffic could add (backend supervision series excluded)."""
        return {(s.name, tuple(sorted(s.labels.items()))) for s in self.samples
                if not s.name.startswith("mcpgate_backend_")}


def scrape(client: httpx2.Client, port: int) -> Scrape:
    r = client.get(f"http://127.0.0.1:{port}/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return Scrape(r.text)


def test_metrics_after_a_scripted_workload_and_bounded_cardinality(start_gateway: StartGateway, tmp_path: Path) -> None:
    metrics_port = support.free_port()
    gw = start_gateway(config(metrics_port))
    with httpx2.Client(timeout=30) as client:
        a, b = Host(client, gw.url), Host(client, gw.url)
        a.initialize()
        b.initialize()
        for _ in range(2):
            assert "tools" in a.request("tools/list")["result"]
        assert a.request("ping")["result"] == {}
        for i in range(3):
            r = a.request("tools/call", {"name": "fx__echo", "arguments": {"text": str(i)}})
            assert r["result"]["content"][0]["text"] == str(i)
        r = a.request("tools/call", {"name": "fx__sleep", "arguments": {"s": 2}})
        assert "did not answer" in r["error"]["message"], r
        r = b.request("tools/call", {"name": "crashy__echo", "arguments": {"text": "x"}})
        assert r["error"]["data"]["backend"] == "crashy", r
        for name in ["nope__a", "nope__b"]:
            assert b.request("tools/call", {"name": name, "arguments": {}})["error"]["code"] == -32602
        assert b.request("made/up")["error"]["code"] == -32601
        # Rejections before routing.
        assert a.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"Accept": "application/json"}).status_code == 406
        assert a.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"Content-Type": "text/plain"}).status_code == 415
        assert a.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"Mcp-Session-Id": "no-such-session"}).status_code == 404
        anonymous = Host(client, gw.url)
        assert anonymous.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 400
        # b leaves.
        assert client.delete(gw.url, headers=b.headers()).status_code == 200

        m = scrape(client, metrics_port)
        req = "mcpgate_requests_total"
        assert m.value(req, method="initialize", backend="none", outcome="ok") == 2
        assert m.value(req, method="tools/list", backend="none", outcome="ok") == 2
        assert m.value(req, method="ping", backend="none", outcome="ok") == 1
        assert m.value(req, method="tools/call", backend="fx", outcome="ok") == 3
        assert m.value(req, method="tools/call", backend="fx", outcome="timeout") == 1
        assert m.value(req, method="tools/call", backend="crashy", outcome="unavailable") == 1
        assert m.value(req, method="tools/call", backend="none", outcome="error") == 2
        assert m.value(req, method="other", backend="none", outcome="error") == 1
        # Every one of them came from session-based (legacy) hosts.
        assert m.value(req, method="tools/call", era="legacy") == 7
        assert m.value(req, era="modern") is None
        assert m.value("mcpgate_request_duration_seconds_count", method="tools/call") == 7
        assert m.value("mcpgate_upstream_duration_seconds_count", backend="fx") == 4
        assert m.value("mcpgate_sessions_active") == 1
        assert m.value("mcpgate_sse_streams_open") == 0
        assert m.value("mcpgate_upstream_inflight", backend="fx") == 0
        assert m.value("mcpgate_backend_up", backend="fx") == 1
        assert m.value("mcpgate_backend_up", backend="dead") == 0
        errors = {(s.labels["backend"], s.labels["class"]): s.value for s in m.samples
                  if s.name == "mcpgate_upstream_errors_total"}
        assert errors == {("fx", "timeout"): 1, ("crashy", "closed"): 1}, errors
        rejections = {s.labels["reason"]: s.value for s in m.samples if s.name == "mcpgate_rejections_total"}
        assert rejections == {"accept": 1, "content_type": 1, "session_unknown": 1, "session_missing": 1}, rejections
        assert m.value("mcpgate_list_cache_lookups_total", result="hit") == 2
        assert m.value("mcpgate_received_bytes_total") > 0
        assert m.value("mcpgate_sent_bytes_total") > 0
        # The crash-on-start backend failed its catalogue fetch while the others answered.
        assert m.value("mcpgate_fanout_partial_failures_total") >= 1

        # Cardinality: 1,000 unknown methods and 1,000 unknown tools add no series.
        before = m.series()
        for i in range(1000):
            assert a.request(f"x/unknown-{i}")["error"]["code"] == -32601
            assert a.request("tools/call", {"name": f"no_such_tool_{i}", "arguments": {}})["error"]["code"] == -32602
        after = scrape(client, metrics_port)
        assert after.series() == before, sorted(after.series() - before)[:10]
        assert after.value(req, method="other", backend="none", outcome="error") == 1001
        assert after.value(req, method="tools/call", backend="none", outcome="error") == 1002
        # The crash-looping backend was retried (backed off) meanwhile.
        assert (after.value("mcpgate_backend_restarts_total", backend="dead") or 0) >= 1
