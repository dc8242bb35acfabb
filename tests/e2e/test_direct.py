"""The pinned third-party servers, talked to directly by the Python SDK (no gateway).

These pass without the gateway: they prove the components the gateway tests rely on
(server-everything on Node, mcp-server-time, the SDK's stdio client) work on this machine,
so a failure in the gateway tests is the gateway's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import support
from support import StdioCommand

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_everything_direct(everything: StdioCommand, tmp_path: Path) -> None:
    async with support.stdio_session(everything, tmp_path / "everything.stderr") as s:
        assert s.server_info is not None
        tools = {t.name for t in await support.all_tools(s)}
        assert {"echo", "get-sum", "get-tiny-image", "get-structured-content"} <= tools

        echo = support.dump(await s.call_tool("echo", {"message": "hello"}))
        assert echo["content"] == [{"type": "text", "text": "Echo: hello"}]
        assert not echo.get("isError")

        resources = {r.uri for r in await support.all_resources(s)}
        assert "demo://resource/static/document/features.md" in resources
        read = support.dump(await s.read_resource("demo://resource/static/document/features.md"))
        assert read["contents"][0]["uri"] == "demo://resource/static/document/features.md"
        assert read["contents"][0]["text"].startswith("# ")

        templates = {t.uri_template for t in await support.all_resource_templates(s)}
        assert "demo://resource/dynamic/text/{resourceId}" in templates

        prompt = support.dump(await s.get_prompt("simple-prompt"))
        assert prompt["messages"][0]["content"]["type"] == "text"


async def test_time_direct(time_server: StdioCommand, tmp_path: Path) -> None:
    async with support.stdio_session(time_server, tmp_path / "time.stderr") as s:
        tools = {t.name for t in await support.all_tools(s)}
        assert tools == {"get_current_time", "convert_time"}
        result = support.dump(await s.call_tool("get_current_time", {"timezone": "UTC"}))
        assert result["structuredContent"]["timezone"] == "UTC"
        assert json.loads(result["content"][0]["text"])["timezone"] == "UTC"
