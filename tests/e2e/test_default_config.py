"""(a) The shipped config/mcpgate.toml: the built-in demo backend `demo` over stdio.

A real MCP host (the official Python SDK over Streamable HTTP) sees the demo server's
catalogue under the `demo__` / `demo+` namespace, and every call through the gateway gives
what the same demo server gives directly over stdio.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import support
from support import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PREFIX = "demo"


def pick(names: list[str], preferred: list[str]) -> str:
    for name in preferred:
        if name in names:
            return name
    assert names, "the demo server offers nothing of this kind"
    return names[0]


async def test_tools_namespaced_and_callable(default_gateway: Gateway, tmp_path: Path) -> None:
    async with support.http_session(default_gateway.url) as gw:
        tools = await support.all_tools(gw)
        names = [t.name for t in tools]
        assert names, "no tools through the gateway"
        assert all(n.startswith("demo__") for n in names), names
        no_args = [t.name for t in tools if not (t.input_schema or {}).get("required")]
        name = pick(no_args, ["demo__test_simple_text", "demo__echo"])
        via_gw = support.dump(await gw.call_tool(name, {}))
    assert via_gw["content"], via_gw
    assert not via_gw.get("isError"), via_gw

    async with support.stdio_session(support.demo_stdio_command(), tmp_path / "demo.stderr") as direct:
        direct_result = support.dump(await direct.call_tool(name.removeprefix("demo__"), {}))
    assert support.strip_uri_prefixes(via_gw, PREFIX) == direct_result


async def test_catalogue_mirrors_demo_server(default_gateway: Gateway, tmp_path: Path) -> None:
    async with (
        support.http_session(default_gateway.url) as gw,
        support.stdio_session(support.demo_stdio_command(), tmp_path / "demo.stderr") as direct,
    ):
        await support.assert_catalogue_mirrors(gw, direct, PREFIX, exact=True)


async def test_resource_through_template(default_gateway: Gateway, tmp_path: Path) -> None:
    async with support.http_session(default_gateway.url) as gw:
        templates = [t.uri_template for t in await support.all_resource_templates(gw)]
        assert templates, "no resource templates through the gateway"
        assert all(t.startswith("demo+") for t in templates), templates
        template = pick(templates, ["demo+test://template/{id}/data"])
        uri = support.expand_template(template, "123")
        via_gw = support.dump(await gw.read_resource(uri))
    contents = via_gw["contents"]
    assert contents, via_gw
    assert contents[0]["uri"] == uri, "resource contents must carry the namespaced URI the host asked for"
    if template == "demo+test://template/{id}/data":
        assert "123" in contents[0].get("text", ""), contents[0]

    async with support.stdio_session(support.demo_stdio_command(), tmp_path / "demo.stderr") as direct:
        direct_result = support.dump(await direct.read_resource(uri.removeprefix("demo+")))
    assert support.strip_uri_prefixes(via_gw, PREFIX) == direct_result


async def test_prompt(default_gateway: Gateway, tmp_path: Path) -> None:
    async with support.http_session(default_gateway.url) as gw:
        prompts = await support.all_prompts(gw)
        assert prompts, "no prompts through the gateway"
        assert all(p.name.startswith("demo__") for p in prompts), [p.name for p in prompts]
        no_args = [p.name for p in prompts if not any(a.required for a in (p.arguments or []))]
        name = pick(no_args, ["demo__test_simple_prompt"])
        via_gw = support.dump(await gw.get_prompt(name))
    assert via_gw["messages"], via_gw

    async with support.stdio_session(support.demo_stdio_command(), tmp_path / "demo.stderr") as direct:
        direct_result = support.dump(await direct.get_prompt(name.removeprefix("demo__")))
    assert support.strip_uri_prefixes(via_gw, PREFIX) == direct_result
