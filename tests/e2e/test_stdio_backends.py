"""(b) Third-party stdio backends: server-everything (`everything`) and mcp-server-time (`time`).

One host session sees both catalogues, namespaced; every call through the gateway gives
what the same server gives when the SDK talks to it directly over stdio, except for the
names and URI prefixes (and, for the time server, the clock).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

import support
from support import Gateway, StartGateway, StdioCommand

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

STATIC_DOC = "demo://resource/static/document/features.md"


@pytest.fixture
def gateway(start_gateway: StartGateway, everything: StdioCommand, time_server: StdioCommand) -> Gateway:
    return start_gateway({"everything": everything.backend(), "time": time_server.backend()})


async def test_one_session_lists_both_catalogues(gateway: Gateway) -> None:
    async with support.http_session(gateway.url) as gw:
        tools = [t.name for t in await support.all_tools(gw)]
        assert {"time__get_current_time", "time__convert_time"} <= set(tools), tools
        assert {"everything__echo", "everything__get-sum"} <= set(tools), tools
        assert all(n.startswith(("time__", "everything__")) for n in tools), tools
        assert len(tools) == len(set(tools)), "duplicate tool names"

        prompts = [p.name for p in await support.all_prompts(gw)]
        assert "everything__simple-prompt" in prompts, prompts
        assert all(n.startswith("everything__") for n in prompts), prompts

        resources = [r.uri for r in await support.all_resources(gw)]
        assert f"everything+{STATIC_DOC}" in resources, resources
        assert all(u.startswith("everything+") for u in resources), resources


async def test_catalogues_mirror_direct(
    gateway: Gateway, everything: StdioCommand, time_server: StdioCommand, tmp_path: Path
) -> None:
    async with (
        support.http_session(gateway.url) as gw,
        support.stdio_session(time_server, tmp_path / "time.stderr") as time_direct,
        support.stdio_session(everything, tmp_path / "everything.stderr") as everything_direct,
    ):
        await support.assert_catalogue_mirrors(gw, time_direct, "time", exact=True)
        # server-everything adds tools depending on the client's capabilities.
        await support.assert_catalogue_mirrors(gw, everything_direct, "everything", exact=False)


def _mask_clock(result: dict) -> tuple[dict, datetime]:
    """The result with its timestamp fields masked, and the timestamp."""
    result = json.loads(json.dumps(result))
    structured = result["structuredContent"]
    stamp = datetime.fromisoformat(structured["datetime"])
    for payload in (structured, *[json.loads(c["text"]) for c in result["content"] if c["type"] == "text"]):
        assert payload["datetime"] == structured["datetime"]
    masked_text = []
    for c in result["content"]:
        if c["type"] == "text":
            payload = json.loads(c["text"])
            payload["datetime"] = payload["day_of_week"] = "<masked>"
            masked_text.append({**c, "text": payload})
        else:
            masked_text.append(c)
    result["content"] = masked_text
    structured["datetime"] = structured["day_of_week"] = "<masked>"
    return result, stamp


async def test_time_tools_match_direct(gateway: Gateway, time_server: StdioCommand, tmp_path: Path) -> None:
    convert_args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    async with support.http_session(gateway.url) as gw:
        now_gw = support.dump(await gw.call_tool("time__get_current_time", {"timezone": "UTC"}))
        convert_gw = support.dump(await gw.call_tool("time__convert_time", convert_args))
    async with support.stdio_session(time_server, tmp_path / "time.stderr") as direct:
        now_direct = support.dump(await direct.call_tool("get_current_time", {"timezone": "UTC"}))
        convert_direct = support.dump(await direct.call_tool("convert_time", convert_args))

    assert not now_gw.get("isError"), now_gw
    assert now_gw["structuredContent"]["timezone"] == "UTC"
    masked_gw, stamp_gw = _mask_clock(now_gw)
    masked_direct, stamp_direct = _mask_clock(now_direct)
    assert masked_gw == masked_direct
    assert abs((stamp_gw - stamp_direct).total_seconds()) < 120

    assert not convert_gw.get("isError"), convert_gw
    assert convert_gw == convert_direct


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("echo", {"message": "hello through mcpgate ✓"}),
        ("get-sum", {"a": 2, "b": 40}),
        ("get-tiny-image", {}),
        ("get-structured-content", {"location": "Chicago"}),
        ("get-annotated-message", {"messageType": "success", "includeImage": True}),
    ],
)
async def test_everything_tools_match_direct(
    gateway: Gateway, everything: StdioCommand, tmp_path: Path, tool: str, args: dict
) -> None:
    async with support.http_session(gateway.url) as gw:
        via_gw = support.dump(await gw.call_tool(f"everything__{tool}", args))
    async with support.stdio_session(everything, tmp_path / "everything.stderr") as direct:
        via_direct = support.dump(await direct.call_tool(tool, args))
    assert not via_direct.get("isError"), via_direct
    assert support.strip_uri_prefixes(via_gw, "everything") == via_direct


async def test_everything_resource_and_prompts_match_direct(
    gateway: Gateway, everything: StdioCommand, tmp_path: Path
) -> None:
    async with support.http_session(gateway.url) as gw:
        read_gw = support.dump(await gw.read_resource(f"everything+{STATIC_DOC}"))
        simple_gw = support.dump(await gw.get_prompt("everything__simple-prompt"))
        args_gw = support.dump(await gw.get_prompt("everything__args-prompt", {"city": "Paris", "state": "IDF"}))
    async with support.stdio_session(everything, tmp_path / "everything.stderr") as direct:
        read_direct = support.dump(await direct.read_resource(STATIC_DOC))
        simple_direct = support.dump(await direct.get_prompt("simple-prompt"))
        args_direct = support.dump(await direct.get_prompt("args-prompt", {"city": "Paris", "state": "IDF"}))

    assert read_gw["contents"][0]["uri"] == f"everything+{STATIC_DOC}"
    assert support.strip_uri_prefixes(read_gw, "everything") == read_direct
    assert simple_gw == simple_direct
    assert args_gw == args_direct
