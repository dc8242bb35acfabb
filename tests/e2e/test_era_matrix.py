"""The era matrix: which revision each real SDK client reaches in each of its modes.

Real official SDK clients, each in each of its version-negotiation modes, against a real
gateway serving the built-in demo backend, once per server face (`[server] modern`):

- the default, `bridge`: the 2026-07-28 ("modern", stateless) face is served next to the
  session-based revisions. Every probing (`auto`) and pinned mode must connect at 2026-07-28,
  every legacy mode at 2025-11-25, and each must list tools, call a tool, read a resource and
  get a prompt.
- `off`: a modern probe is refused with the fallback answer (400, a non-modern -32000 with the
  probe's id). Probing modes fall back to `initialize` at 2025-11-25 and do the five
  operations; pinned modes fail cleanly (the client reports an error, no hang, no fallback).

| client | legacy modes | probing modes | pinned modes |
|---|---|---|---|
| TypeScript SDK `@modelcontextprotocol/client` (tests/e2e/clients/ts-client.mjs) | legacy | auto | pin 2026-07-28 |
| Python `mcp` (in process) | legacy | default (= auto), auto | 2026-07-28 |
| rmcp (tests/clients/rmcp-client, built once here) | initialize | Auto | Discover |
| Go SDK (no Go toolchain here: its sequence replayed over raw HTTP) | | its one probing mode | |
| MCP Inspector CLI `--protocol-era` (one connect per operation) | legacy | auto | modern |

What happened is also checked on the gateway's side, from its metrics and its access log:
on the modern path no `modern_probe` refusal, no `initialize`, no session, the expected number
of `server/discover` served, and every operation logged without a session; on the legacy path
one `initialize` per connect, every operation on a session, and exactly one refused probe per
probing connect with the face off (the probe was sent, refused, and not retried). How each SDK
probes and falls back: tests/e2e/clients/README.md.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
# The operations as the access log names them (method, name): tools/list is served from the
# catalogue (no name: the field is absent), the other three are routed to the demo backend.
OPERATIONS = [("tools/list", None), ("tools/call", TOOL), ("resources/read", URI), ("prompts/get", PROMPT)]

LEGACY = "2025-11-25"  # what the gateway negotiates with every client that initializes
MODERN = "2026-07-28"
SERVED = ["2025-11-25", "2025-06-18", "2025-03-26"]  # the legacy revisions, named in the fallback answer
CLIENT_TIMEOUT = 45.0  # seconds for one client process (each also bounds itself at 30 s)

# How a client mode negotiates: never probes / probes and falls back / modern only.
LEGACY_MODE, PROBING, PINNED = "legacy", "probing", "pinned"


# Loopback only: never through an HTTP proxy from the environment.
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClientFailed(AssertionError):
    """The client ran to its end and reported a failure (a clean failure, not a hang or a crash)."""


# --------------------------------------------------------------------------- the gateway

ACCESS_LINE = re.compile(r"mcpgate::access: request (.*)$")
ACCESS_FIELD = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class Seen:
    """What the gateway did while one client ran (deltas of its metrics, its access log lines)."""

    refused_probes: float  # mcpgate_rejections_total{reason="modern_probe"}
    requests: dict[str, float]  # mcpgate_requests_total by method, any outcome but refused
    sessions_active: float  # mcpgate_sessions_active at the end
    access: list[dict[str, str]] = field(default_factory=list)  # mcpgate::access entries

    def entries(self, method: str, name: str | None) -> list[dict[str, str]]:
        return [e for e in self.access if e.get("method") == method and e.get("name") == name]


@dataclass
class Target:
    """A gateway on the demo backend, with its own metrics port, serving face `modern`."""

    gateway: Gateway
    metrics_port: int
    modern: str  # "bridge" (the default) or "off"

    @property
    def url(self) -> str:
        return self.gateway.url

    def _metrics(self) -> tuple[float, dict[str, float], float]:
        with LOOPBACK.open(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        refused, requests, sessions = 0.0, {}, 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "mcpgate_rejections_total" and s.labels.get("reason") == "modern_probe":
                    refused += s.value
                elif s.name == "mcpgate_requests_total":
                    method = s.labels["method"]
                    requests[method] = requests.get(method, 0.0) + s.value
                elif s.name == "mcpgate_sessions_active":
                    sessions = s.value
        return refused, requests, sessions

    def _log_size(self) -> int:
        return self.gateway.process.log_path.stat().st_size

    def snapshot(self) -> tuple[float, dict[str, float], int]:
        refused, requests, _ = self._metrics()
        return refused, requests, self._log_size()

    def since(self, snap: tuple[float, dict[str, float], int]) -> Seen:
        """What happened after `snap`, once the gateway has finished recording it.

        A request is recorded when its context drops, which for a streamed answer can be a
        moment after the client has its answer: wait until two reads 0.2 s apart agree.
        """
        refused0, requests0, offset = snap
        deadline = time.monotonic() + 3
        last = None
        while True:
            now = (*self._metrics(), self._log_size())
            if now == last or time.monotonic() > deadline:
                break
            last = now
            time.sleep(0.2)
        refused, requests, sessions, _ = now
        with open(self.gateway.process.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        access = [dict(ACCESS_FIELD.findall(m.group(1))) for m in map(ACCESS_LINE.search, text.splitlines()) if m]
        delta = {k: v - requests0.get(k, 0.0) for k, v in requests.items() if v != requests0.get(k, 0.0)}
        return Seen(refused - refused0, delta, sessions, access)


@pytest.fixture(params=["bridge", "off"])
def target(request: pytest.FixtureRequest, start_gateway: StartGateway) -> Target:
    """config/mcpgate.toml's demo backend; metrics on a free port (the default 9464 may be taken).

    `bridge` leaves `[server] modern` out: the face under test is the shipped default.
    """
    metrics_port = support.free_port()
    server: dict[str, Any] = {"metrics_listen": f"127.0.0.1:{metrics_port}"}
    if request.param != "bridge":
        server["modern"] = request.param
    demo = {"type": "stdio", "command": "${MCPGATE_EXE}", "args": ["demo-server"], "mode": "per_session"}
    gw = start_gateway(support.gateway_toml({"demo": demo}, server))
    # The MCP port is bound before the metrics one: wait for that too.
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", metrics_port), timeout=0.5):
                return Target(gw, metrics_port, request.param)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def served_era(target: Target, kind: str) -> str | None:
    """The revision a client of `kind` reaches on this face (None: it must fail cleanly)."""
    if kind == LEGACY_MODE:
        return LEGACY
    if target.modern == "off":
        return LEGACY if kind == PROBING else None
    return MODERN


def assert_modern_path(seen: Seen, discovers: int) -> None:
    """Served on the 2026-07-28 face: nothing refused, no handshake, no session; `discovers`
    `server/discover` answered; every operation reached the gateway without a session."""
    assert seen.refused_probes == 0, seen
    assert seen.requests.get("initialize", 0) == 0, seen.requests
    assert seen.requests.get("server/discover", 0) == discovers, seen.requests
    assert seen.sessions_active == 0, seen
    for method, name in OPERATIONS:
        entries = seen.entries(method, name)
        assert entries, f"no access log entry for {method} {name}: {seen.access}"
        assert all("session" not in e and e["outcome"] == "ok" for e in entries), entries


def assert_legacy_path(seen: Seen, connects: int, refused: int) -> None:
    """Served on a session: `connects` handshakes, `refused` modern probes refused (and not
    retried), no `server/discover` answered; every operation on a session."""
    assert seen.refused_probes == refused, seen
    assert seen.requests.get("initialize", 0) == connects, seen.requests
    assert seen.requests.get("server/discover", 0) == 0, seen.requests
    for method, name in OPERATIONS:
        entries = seen.entries(method, name)
        assert entries, f"no access log entry for {method} {name}: {seen.access}"
        assert all(e.get("session") and e["outcome"] == "ok" for e in entries), entries


def run_mode(target: Target, kind: str, run: Callable[[], dict[str, Any]], *, connects: int = 1,
             discovers: int = 1) -> dict[str, Any] | None:
    """Runs one client mode and checks it end to end on both sides.

    `connects`: how many times the run connects (the Inspector connects once per operation);
    `discovers`: how many `server/discover` each connect sends on the modern face (a pinned
    Python client sends none). Returns the client's summary, or None for a clean failure.
    """
    era = served_era(target, kind)
    snap = target.snapshot()
    if era is None:
        with pytest.raises(ClientFailed):
            run()
        seen = target.since(snap)
        # Each connect's first modern request was refused once; nothing else was tried.
        assert seen.refused_probes == connects, seen
        assert seen.requests == {}, seen.requests
        return None
    summary = run()
    seen = target.since(snap)
    check_five(summary, era)
    if era == MODERN:
        assert_modern_path(seen, discovers * connects)
    else:
        assert_legacy_path(seen, connects, refused=connects if kind == PROBING else 0)
    return summary


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


@pytest.mark.parametrize("mode, kind", [("legacy", LEGACY_MODE), ("auto", PROBING), (f"pin:{MODERN}", PINNED)])
def test_typescript_sdk(target: Target, mode: str, kind: str) -> None:
    summary = run_mode(target, kind, lambda: ts_client(target, mode))
    if summary is not None:
        assert summary["era"] == ("modern" if summary["protocolVersion"] == MODERN else "legacy"), summary
        assert summary["server"] == "mcpgate", summary


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


# The pinned mode sends no probe: it synthesizes a DiscoverResult, its first request is tools/list.
@pytest.mark.parametrize("mode, kind, discovers", [
    (None, PROBING, 1), ("auto", PROBING, 1), ("legacy", LEGACY_MODE, 0), (MODERN, PINNED, 0)])
def test_python_sdk(target: Target, mode: str | None, kind: str, discovers: int) -> None:
    run_mode(target, kind, lambda: py_client(target, mode), discovers=discovers)


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
@pytest.mark.parametrize("mode, kind", [("initialize", LEGACY_MODE), ("auto", PROBING), ("discover", PINNED)])
def test_rmcp(rmcp_client: Path, target: Target, mode: str, kind: str) -> None:
    summary = run_mode(target, kind, lambda: rmcp(rmcp_client, target, mode))
    if summary is not None:
        assert summary["server"] == "mcpgate", summary


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


GO_BASE = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
GO_CAPS = {"roots": {"listChanged": True}}  # the Go client's default capabilities
GO_INFO = {"name": "go-sdk-replay", "version": "v1.7.0"}


def go_modern(url: str, id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 request: the envelope in `_meta`, the standard headers mirroring the body."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientInfo": GO_INFO,
            "io.modelcontextprotocol/clientCapabilities": GO_CAPS}
    headers = {**GO_BASE, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name = params.get("name", params.get("uri"))
    if name is not None:
        headers["Mcp-Name"] = name
    answer = http("POST", url, headers, {"jsonrpc": "2.0", "id": id_, "method": method,
                                         "params": {**params, "_meta": meta}})
    assert "mcp-session-id" not in {k.lower() for k in answer.headers}, answer.headers
    assert answer.status == 200, answer
    msg = answer.response(id_)
    assert "result" in msg, msg
    assert msg["result"]["resultType"] == "complete", msg
    return msg["result"]


def go_legacy(url: str) -> dict[str, Any]:
    """The fallback: initialize at 2025-11-25 (no version header before the handshake), the five
    operations on the session, DELETE."""
    init = http("POST", url, GO_BASE, {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": GO_CAPS, "clientInfo": GO_INFO}})
    assert init.status == 200, init
    assert init.response(2)["result"]["protocolVersion"] == LEGACY, init
    session = init.headers["mcp-session-id"]
    assert session, init.headers
    h = {**GO_BASE, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    assert http("POST", url, h, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202

    def call(id_: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params else {})}
        return http("POST", url, h, body).response(id_)["result"]

    summary: dict[str, Any] = {"protocolVersion": LEGACY}
    summary["tools"] = [t["name"] for t in call(3, "tools/list")["tools"]]
    summary["call"] = call(4, "tools/call", {"name": TOOL, "arguments": ARGS})
    summary["read"] = call(5, "resources/read", {"uri": URI})
    summary["prompt"] = call(6, "prompts/get", {"name": PROMPT})
    assert http("DELETE", url, {"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}).status == 200
    return summary


def go_sdk_replay(target: Target) -> dict[str, Any]:
    """`Client.Connect` (always probes: server/discover with the full envelope, no session), then
    the five operations in the era its verdict chose."""
    url = target.url
    probe = http("POST", url, {**GO_BASE, "MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}, {
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                             "io.modelcontextprotocol/clientInfo": GO_INFO,
                             "io.modelcontextprotocol/clientCapabilities": GO_CAPS}}})
    assert "mcp-session-id" not in {k.lower() for k in probe.headers}, probe.headers
    if target.modern == "off":
        assert probe.status == 400, probe
        refusal = probe.response(1)  # the error carries the probe's id
        assert refusal["error"]["code"] not in (-32020, -32021, -32022), refusal
        assert all(v in refusal["error"]["message"] for v in [*SERVED, "initialize"]), refusal
        assert go_sdk_wants_fallback(probe), refusal
        return go_legacy(url)
    assert probe.status == 200, probe
    discovered = probe.response(1)["result"]
    assert discovered["supportedVersions"] == [MODERN, *SERVED], discovered
    assert not go_sdk_wants_fallback(probe), discovered
    summary: dict[str, Any] = {"protocolVersion": MODERN, "tools": []}
    cursor, id_ = None, 2
    while True:
        page = go_modern(url, id_, "tools/list", {"cursor": cursor} if cursor else {})
        summary["tools"] += [t["name"] for t in page["tools"]]
        cursor, id_ = page.get("nextCursor"), id_ + 1
        if not cursor:
            break
    summary["call"] = go_modern(url, id_, "tools/call", {"name": TOOL, "arguments": ARGS})
    summary["read"] = go_modern(url, id_ + 1, "resources/read", {"uri": URI})
    summary["prompt"] = go_modern(url, id_ + 2, "prompts/get", {"name": PROMPT})
    return summary


def test_go_sdk_probe_sequence(target: Target) -> None:
    run_mode(target, PROBING, lambda: go_sdk_replay(target))


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


INSPECTOR_RUNS = {
    "tools": ["--method", "tools/list"],
    "call": ["--method", "tools/call", "--tool-name", TOOL, "--tool-arg", f"text={ARGS['text']}"],
    "read": ["--method", "resources/read", "--uri", URI],
    "prompt": ["--method", "prompts/get", "--prompt-name", PROMPT],
}


def inspector_five(target: Target, era: str, expect: str) -> dict[str, Any]:
    """One Inspector run per operation, each connecting afresh; the four run side by side.

    The CLI prints only the operation's result, so the summary takes `expect` as the revision;
    the gateway's side (run_mode) shows which one was served."""
    with ThreadPoolExecutor(len(INSPECTOR_RUNS)) as pool:
        futures = {key: pool.submit(inspector, target, era, *argv) for key, argv in INSPECTOR_RUNS.items()}
        summary = {key: f.result() for key, f in futures.items()}
    summary["tools"] = [t["name"] for t in summary["tools"]["tools"]]
    return {"protocolVersion": expect, **summary}


@pytest.mark.parametrize("era, kind", [("legacy", LEGACY_MODE), ("auto", PROBING), ("modern", PINNED)])
def test_inspector_cli(target: Target, era: str, kind: str) -> None:
    expect = served_era(target, kind)
    run_mode(target, kind, lambda: inspector_five(target, era, expect or MODERN), connects=len(INSPECTOR_RUNS))
