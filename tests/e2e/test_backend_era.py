"""The client face's era against a real dual-era stdio backend: mcp-server-time 2026.10.19
answers `server/discover` with 2026-07-28, so with `era = "auto"` (the default) mcpgate
speaks to it statelessly (no `initialize`, `_meta` on every request), and a 2025-11-25
host session through mcpgate lists and calls its tools without seeing modern-only fields.
With `era = "legacy"` the same server gets `initialize`.

What mcpgate writes to the child is recorded by a `tee` in front of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import support
from support import StartGateway, StdioCommand

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _teed(time_server: StdioCommand, log: Path, era: str) -> dict:
    """A backend table running the time server behind `tee -a LOG`."""
    inner = " ".join([time_server.command, *time_server.args])
    return time_server.backend(
        command="/bin/sh", args=["-c", f"tee -a '{log}' | exec {inner}"], era=era
    )


def _sent(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def test_auto_speaks_2026_07_28_to_mcp_server_time(
    start_gateway: StartGateway, time_server: StdioCommand, tmp_path: Path
) -> None:
    log = tmp_path / "to-time.jsonl"
    gateway = start_gateway({"time": _teed(time_server, log, "auto")})
    async with support.http_session(gateway.url) as gw:
        tools = [t.name for t in await support.all_tools(gw)]
        assert {"time__get_current_time", "time__convert_time"} <= set(tools), tools
        result = await gw.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert not result.is_error, result
        body = json.loads(result.content[0].text)
        assert body["timezone"] == "UTC", body
        # Only what came on the wire (the SDK's model defaults resultType).
        raw = result.model_dump(by_alias=True, exclude_unset=True)
        assert "resultType" not in raw and "ttlMs" not in raw, raw
    sent = _sent(log)
    methods = [m.get("method") for m in sent]
    assert methods[0] == "server/discover", methods
    assert "initialize" not in methods, methods
    calls = [m for m in sent if m.get("method") == "tools/call"]
    assert calls, methods
    meta = calls[0]["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28", meta
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}, meta
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "mcpgate", meta


async def test_legacy_era_initializes_mcp_server_time(
    start_gateway: StartGateway, time_server: StdioCommand, tmp_path: Path
) -> None:
    log = tmp_path / "to-time.jsonl"
    gateway = start_gateway({"time": _teed(time_server, log, "legacy")})
    async with support.http_session(gateway.url) as gw:
        result = await gw.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert not result.is_error, result
    methods = [m.get("method") for m in _sent(log)]
    assert methods[0] == "initialize", methods
    assert "server/discover" not in methods, methods
