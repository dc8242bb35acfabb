"""The era matrix, legacy half (issue 13; shared/design/dual-era.md R0 and §J.1).

Real official SDK clients, each in each of its version-negotiation modes, against a real
gateway serving the built-in demo backend: every mode that can work today must connect, list
tools, call a tool, read a resource and get a prompt. The modes that need the 2026-07-28
("modern") face are expected to fail cleanly (the client reports an error, no hang):
`xfail(strict=True)` turns them into a reminder the day the modern face lands.

| client | modes that pass now | xfail until the modern face |
|---|---|---|
| TypeScript SDK `@modelcontextprotocol/client` (tests/e2e/clients/ts-client.mjs) | legacy, auto | pin 2026-07-28 |
| Python `mcp` (in process) | auto (the default), legacy | pinned 2026-07-28 |
| rmcp (tests/clients/rmcp-client, built once here) | initialize, Auto | Discover |
| Go SDK (no Go toolchain here: its probe sequence replayed over raw HTTP) | probe + fallback | |
| MCP Inspector CLI `--protocol-era` | legacy, auto | modern |

Every probing mode is also checked on the gateway's side: exactly one `modern_probe`
rejection per connect (the probe was sent, refused with the R0 answer, and not retried),
none for the legacy modes. How each SDK probes and falls back: tests/e2e/clients/README.md.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

import support
from support import Gateway, StartGateway

pytestmark = [pytest.mark.timeout(90)]

CLIENTS = Path(__file__).resolve().parent / "clients"
TS_CLIENT = CLIENTS / "ts-client.mjs"
RMCP_MANIFEST = support.TESTS / "clients" / "rmcp-client" / "Cargo.toml"
INSPECTOR = support.NODE_MODULES / ".bin" / "mcp-inspector"

# What the five operations use: the demo backend of config/mcpgate.toml under prefix `demo`.
TOOL = "demo__echo"
ARGS = {"text": "era matrix"}
URI = "demo+demo://readme"
PROMPT = "demo__test_simple_prompt"

LEGACY = "2025-11-25"  # what the gateway negotiates with every probing client that falls back
MODERN = "2026-07-28"
SERVED = ["2025-11-25", "2025-06-18", "2025-03-26"]
CLIENT_TIMEOUT = 45.0  # seconds for one client process (each also bounds itself at 30 s)


# Loopback only: never through an HTTP proxy from the environment.
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClientFailed(AssertionError):
    """The client ran to its end and reported a failure (a clean failure, not a hang or a crash)."""


NOT_SERVED_YET = pytest.mark.xfail(
    strict=True, raises=ClientFailed, reason="modern face not served yet (issue 13)"
)


# --------------------------------------------------------------------------- the gateway


@dataclass
class Target:
    """A gateway on the demo backend, with its own metrics port."""

    gateway: Gateway
    metrics_port: int

    @property
    def url(self) -> str:
        return self.gateway.url

    def refused_probes(self) -> float:
        """`mcpgate_rejections_total{reason="modern_probe"}`."""
        with LOOPBACK.open(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "mcpgate_rejections_total" and s.labels.get("reason") == "modern_probe"
        )


@pytest.fixture
def target(start_gateway: StartGateway) -> Target:
    """config/mcpgate.toml's demo backend; metrics on a free port (the default 9464 may be taken)."""
    metrics_port = support.free_port()
    demo = {"type": "stdio", "command": "${MCPGATE_EXE}", "args": ["demo-server"], "mode": "per_session"}
    gw = start_gateway(support.gateway_toml({"demo": demo}, {"metrics_listen": f"127.0.0.1:{metrics_port}"}))
    # The MCP port is bound before the metrics one: wait for that too.
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", metrics_port), timeout=0.5):
                return Target(gw, metrics_port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def probes_during(target: Target, run: Callable[[], Any]) -> tuple[Any, float]:
    """Runs `run` and returns its result and how many modern probes the gateway refused meanwhile."""
    before = target.refused_probes()
    result = run()
    return result, target.refused_probes() - before


# --------------------------------------------------------------------------- what every mode must do


def check_five(summary: dict[str, Any], protocol_version: str) -> None:
    """Connected at `protocol_version`; listed, called, read and got a prompt through the gateway."""
    assert summary.get("protocolVersion") == protocol_version, summary
    assert TOOL in summary["tools"], summary["tools"]
    assert all(t.startswith("demo__") for t in summary["tools"]), summary["tools"]
    assert summary["call"]["content"] == [{"type": "text", "text": ARGS["text"]}], summary["call"]
    assert not summary["call"].get("isError"), summary["call"]
    contents = summary["read"]["contents"]
    assert contents[0]["uri"] == URI, contents
    assert contents[0].get("text"), contents
    assert summary["prompt"]["messages"], summary["prompt"]


def run_client(argv: list[str]) -> dict[str, Any]:
    """Runs a client that prints one JSON object: the summary (exit 0) or {stage, error} (exit 1)."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else None
    if proc.returncode == 0 and out is not None:
        return out
    if proc.returncode == 1 and out is not None and "error" in out:
        raise ClientFailed(f"{Path(argv[-7]).name} {out.get('mode')} failed at {out.get('stage')}: "
                           f"{out['error']}\nstderr:\n{proc.stderr[-3000:]}")
    raise AssertionError(
        f"{argv} exited {proc.returncode} without a JSON summary\nstdout:\n{proc.stdout[-3000:]}\n"
        f"stderr:\n{proc.stderr[-3000:]}"
    )


def five_args() -> list[str]:
    return [TOOL, json.dumps(ARGS), URI, PROMPT]


# --------------------------------------------------------------------------- TypeScript SDK


def ts_client(target: Target, mode: str) -> dict[str, Any]:
    node = support.system_node()
    assert node, "no node to run the TypeScript SDK client"
    return run_client([node, str(TS_CLIENT), target.url, mode, *five_args()])


@pytest.mark.parametrize("mode, probes", [("legacy", 0), ("auto", 1)])
def test_typescript_sdk(target: Target, mode: str, probes: int) -> None:
    summary, seen = probes_during(target, lambda: ts_client(target, mode))
    check_five(summary, LEGACY)
    assert summary["era"] == "legacy", summary
    assert seen == probes, f"{seen} modern probes refused during a {mode} connect"


@NOT_SERVED_YET
def test_typescript_sdk_pinned_modern(target: Target) -> None:
    summary = ts_client(target, f"pin:{MODERN}")
    check_five(summary, MODERN)
    assert summary["era"] == "modern", summary


# --------------------------------------------------------------------------- Python SDK


def py_client(target: Target, mode: str | None) -> dict[str, Any]:
    """The five operations with `mcp.Client` (mode None: the SDK's default)."""
    import anyio
    from mcp import Client, MCPError

    async def drive() -> dict[str, Any]:
        kwargs = {} if mode is None else {"mode": mode}
        async with Client(target.url, **kwargs) as client:
            summary: dict[str, Any] = {"protocolVersion": client.protocol_version, "tools": []}
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor)
                summary["tools"] += [t.name for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
            summary["call"] = support.dump(await client.call_tool(TOOL, ARGS))
            summary["read"] = support.dump(await client.read_resource(URI))
            summary["prompt"] = support.dump(await client.get_prompt(PROMPT))
            return summary

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(CLIENT_TIMEOUT):
            return await drive()

    try:
        return anyio.run(bounded)
    except* MCPError as group:
        raise ClientFailed(f"mcp.Client(mode={mode!r}): {group.exceptions}") from group


@pytest.mark.parametrize("mode, probes", [(None, 1), ("auto", 1), ("legacy", 0)])
def test_python_sdk(target: Target, mode: str | None, probes: int) -> None:
    summary, seen = probes_during(target, lambda: py_client(target, mode))
    check_five(summary, LEGACY)
    assert seen == probes, f"{seen} modern probes refused during a mode={mode!r} connect"


@NOT_SERVED_YET
def test_python_sdk_pinned_modern(target: Target) -> None:
    check_five(py_client(target, MODERN), MODERN)


# --------------------------------------------------------------------------- rmcp


@pytest.fixture(scope="session")
def rmcp_client() -> Path:
    """tests/clients/rmcp-client built once (release, its own workspace and Cargo.lock)."""
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR") or support.REPO / "target")
    if not target_dir.is_absolute():
        target_dir = support.REPO / target_dir
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    cmd = ["cargo", "build", "--locked", "--release", "--manifest-path", str(RMCP_MANIFEST)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-5000:]}"
    binary = target_dir / "release" / "rmcp-client"
    assert binary.exists(), binary
    return binary


def rmcp(binary: Path, target: Target, mode: str) -> dict[str, Any]:
    return run_client([str(binary), target.url, mode, *five_args()])


# The first rmcp test also waits for the client's one-time build.
@pytest.mark.timeout(1300)
@pytest.mark.parametrize("mode, probes", [("initialize", 0), ("auto", 1)])
def test_rmcp(rmcp_client: Path, target: Target, mode: str, probes: int) -> None:
    summary, seen = probes_during(target, lambda: rmcp(rmcp_client, target, mode))
    check_five(summary, LEGACY)
    assert summary["server"] == "mcpgate", summary
    assert seen == probes, f"{seen} modern probes refused during a {mode} connect"


@pytest.mark.timeout(1300)
@NOT_SERVED_YET
def test_rmcp_discover(rmcp_client: Path, target: Target) -> None:
    check_five(rmcp(rmcp_client, target, "discover"), MODERN)


# --------------------------------------------------------------------------- Go SDK, replayed


@dataclass
class Answer:
    status: int
    headers: Any
    messages: list[dict[str, Any]]  # the JSON body, or every SSE `data:` message

    def response(self, id_: Any) -> dict[str, Any]:
        found = [m for m in self.messages if m.get("id") == id_ and ("result" in m or "error" in m)]
        assert found, f"no response to id {id_!r} in {self.messages} (HTTP {self.status})"
        return found[-1]


def http(method: str, url: str, headers: dict[str, str], body: Any = None) -> Answer:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        resp = LOOPBACK.open(req, timeout=15)
    except urllib.error.HTTPError as e:
        resp = e
    with resp:
        raw = resp.read().decode()
        ctype = resp.headers.get("content-type", "")
        if ctype.startswith("text/event-stream"):
            messages = [json.loads(line[5:]) for line in raw.splitlines() if line.startswith("data:") and line[5:].strip()]
        elif raw.strip():
            messages = [json.loads(raw)]
        else:
            messages = []
        return Answer(resp.status, resp.headers, messages)


def go_sdk_wants_fallback(probe: Answer) -> bool:
    """The Go SDK (v1.7) verdict on its `server/discover` probe: True means "legacy, initialize".

    A DiscoverResult naming a 2026-07-28 revision it speaks -> modern; a -32022 naming one ->
    retry the probe at it; anything else (any other error, a 4xx with or without a JSON-RPC
    body, a DiscoverResult naming only handshake-era revisions) -> fall back to `initialize`
    at 2025-11-25 on the same connection (go-sdk #975, #989, #1014).
    """
    msg = next((m for m in probe.messages if "result" in m or "error" in m), None)
    if msg is None:
        return True  # an error without a JSON-RPC body is still an error
    if "result" in msg:
        return MODERN not in msg["result"].get("supportedVersions", [])
    err = msg["error"]
    if err.get("code") == -32022:
        return MODERN not in (err.get("data") or {}).get("supported", [])
    return True


def test_go_sdk_probe_sequence_falls_back(target: Target) -> None:
    url = target.url
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    caps = {"roots": {"listChanged": True}}  # the Go client's default capabilities
    info = {"name": "go-sdk-replay", "version": "v1.7.0"}
    before = target.refused_probes()

    # 1. Connect: server/discover first, full envelope and the 2026 headers, no session.
    probe = http("POST", url, {**base, "MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}, {
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                             "io.modelcontextprotocol/clientInfo": info,
                             "io.modelcontextprotocol/clientCapabilities": caps}}})
    assert probe.status == 400, probe
    refusal = probe.response(1)  # R0: the error carries the probe's id
    assert refusal["error"]["code"] not in (-32020, -32021, -32022), refusal
    assert all(v in refusal["error"]["message"] for v in [*SERVED, "initialize"]), refusal
    assert "mcp-session-id" not in {k.lower() for k in probe.headers}, probe.headers
    assert go_sdk_wants_fallback(probe), refusal

    # 2. The fallback: initialize at 2025-11-25 (no version header before the handshake), initialized.
    init = http("POST", url, base, {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": caps, "clientInfo": info}})
    assert init.status == 200, init
    assert init.response(2)["result"]["protocolVersion"] == LEGACY, init
    session = init.headers["mcp-session-id"]
    assert session, init.headers
    h = {**base, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    assert http("POST", url, h, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202

    # 3. The five operations on the session.
    summary: dict[str, Any] = {"protocolVersion": LEGACY}
    summary["tools"] = [t["name"] for t in http("POST", url, h, {
        "jsonrpc": "2.0", "id": 3, "method": "tools/list"}).response(3)["result"]["tools"]]
    summary["call"] = http("POST", url, h, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                           "params": {"name": TOOL, "arguments": ARGS}}).response(4)["result"]
    summary["read"] = http("POST", url, h, {"jsonrpc": "2.0", "id": 5, "method": "resources/read",
                                           "params": {"uri": URI}}).response(5)["result"]
    summary["prompt"] = http("POST", url, h, {"jsonrpc": "2.0", "id": 6, "method": "prompts/get",
                                             "params": {"name": PROMPT}}).response(6)["result"]
    check_five(summary, LEGACY)
    assert target.refused_probes() - before == 1

    # 4. Close: DELETE ends the session.
    assert http("DELETE", url, {"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}).status == 200


# --------------------------------------------------------------------------- MCP Inspector CLI


def inspector(target: Target, era: str, *args: str) -> dict[str, Any]:
    node = support.system_node()
    assert node, "no node to run the Inspector CLI"
    argv = [node, str(INSPECTOR), "--cli", target.url, "--transport", "http", "--protocol-era", era, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise ClientFailed(f"inspector --protocol-era {era} {args}: exit {proc.returncode}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout
    return json.loads(proc.stdout[start:])


def inspector_five(target: Target, era: str) -> dict[str, Any]:
    """One Inspector run per operation, each connecting afresh; the four run side by side."""
    runs = {
        "tools": ["--method", "tools/list"],
        "call": ["--method", "tools/call", "--tool-name", TOOL, "--tool-arg", f"text={ARGS['text']}"],
        "read": ["--method", "resources/read", "--uri", URI],
        "prompt": ["--method", "prompts/get", "--prompt-name", PROMPT],
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {key: pool.submit(inspector, target, era, *argv) for key, argv in runs.items()}
        summary = {key: f.result() for key, f in futures.items()}
    summary["tools"] = [t["name"] for t in summary["tools"]["tools"]]
    return summary


@pytest.mark.parametrize("era, probes", [("legacy", 0), ("auto", 4)])
def test_inspector_cli(target: Target, era: str, probes: int) -> None:
    summary, seen = probes_during(target, lambda: inspector_five(target, era))
    check_five({"protocolVersion": LEGACY, **summary}, LEGACY)
    assert seen == probes, f"{seen} modern probes refused during four --protocol-era {era} runs"


@NOT_SERVED_YET
def test_inspector_cli_modern(target: Target) -> None:
    check_five({"protocolVersion": MODERN, **inspector_five(target, "modern")}, MODERN)
