"""The legacy→modern MRTR shim end to end: a real third-party 2026-07-28 backend (a Python `mcp`
2.3 `MCPServer`, `mrtr_server.py`, whose tools ask through `Resolve(...)`: on the 2026-07-28
wire each ask is an `input_required` result with the SDK's own sealed `requestState`) behind
mcpgate, and the Python SDK's `ClientSession` in legacy mode (`initialize`, 2025-11-25) as the
host, answering elicitation, sampling and roots with its ordinary callbacks. The host sees
real server→client requests and final results only; the backend sees no `initialize`, only
stateless requests and retries.

What mcpgate writes to the backend is recorded by a `tee` in front of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

import support
from support import StartGateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SERVER = Path(__file__).resolve().parent / "mrtr_server.py"


def _backend(log: Path) -> dict[str, Any]:
    """The Python backend behind `tee -a LOG`, spoken to in its probed era (auto)."""
    inner = f"'{support.venv_python()}' '{SERVER}'"
    return {"type": "stdio", "command": "/bin/sh", "args": ["-c", f"tee -a '{log}' | exec {inner}"]}


def _sent(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


class Host:
    """The host's callbacks, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def elicit(self, _ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(f"elicitation: {params.message}")
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(self, _ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        content = params.messages[0].content
        text = content.text if isinstance(content, types.TextContent) else ""
        self.asked.append(f"sampling: {text}")
        reply = "4" if "2+2" in text else f"Welcome, {text.rsplit(' ', 1)[-1]}!"
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=reply), model="test-model")

    async def roots(self, _ctx: Any) -> types.ListRootsResult:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])


async def test_a_legacy_python_host_answers_a_modern_python_backends_asks(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "to-backend.jsonl"
    gateway = start_gateway({"py": _backend(log)})
    host = Host()
    async with streamable_http_client(gateway.url) as (read, write):
        async with ClientSession(
            read, write,
            elicitation_callback=host.elicit, sampling_callback=host.sample, list_roots_callback=host.roots,
        ) as session:
            init = await session.initialize()
            assert init.protocol_version == "2025-11-25", init

            async def call(tool: str) -> str:
                result = await session.call_tool(f"py__{tool}", {})
                assert not result.is_error, result
                raw = result.model_dump(by_alias=True, exclude_unset=True)
                for k in ("resultType", "inputRequests", "requestState", "ttlMs", "cacheScope"):
                    assert k not in raw, raw
                return result.content[0].text

            assert await call("greet") == "hello Ada"
            assert host.asked == ["elicitation: Your name?"]
            assert await call("add") == "the model says 4"
            assert await call("where") == "roots: file:///work"
            host.asked.clear()
            assert await call("all_at_once") == "Ada / 4 / 1 roots"
            assert sorted(host.asked) == ["elicitation: Your name?", "roots", "sampling: 2+2?"]
            host.asked.clear()
            assert await call("two_steps") == "greeting: Welcome, Ada!"
            assert host.asked == ["elicitation: Your name?", "sampling: Write a greeting for Ada"]

    sent = _sent(log)
    methods = [m.get("method") for m in sent]
    assert "initialize" not in methods, methods
    calls = [m for m in sent if m.get("method") == "tools/call"]
    meta = calls[0]["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28", meta
    caps = meta["io.modelcontextprotocol/clientCapabilities"]
    assert set(caps) == {"elicitation", "sampling", "roots"}, caps
    assert "listChanged" not in caps["roots"], caps
    # two_steps: the first request and two retries, each with a new id, that round's
    # answers and the state the backend gave, unchanged.
    steps = [c for c in calls if c["params"]["name"] == "two_steps"]
    assert len(steps) == 3, steps
    assert len({c["id"] for c in steps}) == 3, steps
    assert "requestState" not in steps[0]["params"], steps[0]
    for c in steps[1:]:
        assert c["params"]["requestState"].startswith("v1."), c
        assert len(c["params"]["inputResponses"]) == 1, c
