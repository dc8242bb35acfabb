"""(c) A remote Streamable HTTP backend: `mcpgate demo-server --http` as `type = "http"`.

Through the gateway the host sees what the SDK sees talking to the demo server's own
HTTP endpoint directly, under the `demo__` / `demo+` namespace.
"""

from __future__ import annotations

import pytest

import support
from support import Gateway, StartGateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PREFIX = "demo"


@pytest.fixture
def gateway(start_gateway: StartGateway, demo_http: str) -> Gateway:
    return start_gateway({"demo": {"type": "http", "url": demo_http}})


async def test_catalogue_mirrors_direct_http(gateway: Gateway, demo_http: str) -> None:
    async with support.http_session(gateway.url) as gw, support.http_session(demo_http) as direct:
        await support.assert_catalogue_mirrors(gw, direct, PREFIX, exact=True)


async def test_tool_resource_prompt_match_direct_http(gateway: Gateway, demo_http: str) -> None:
    async with support.http_session(demo_http) as direct:
        tools = [t for t in await support.all_tools(direct) if not (t.input_schema or {}).get("required")]
        assert tools, "the demo server has no tool callable without arguments"
        names = [t.name for t in tools]
        tool = "test_simple_text" if "test_simple_text" in names else names[0]
        templates = [t.uri_template for t in await support.all_resource_templates(direct)]
        assert templates, "the demo server has no resource template"
        template = "test://template/{id}/data" if "test://template/{id}/data" in templates else templates[0]
        uri = support.expand_template(template, "123")
        prompts = [p.name for p in await support.all_prompts(direct) if not any(a.required for a in p.arguments or [])]
        assert prompts, "the demo server has no prompt without required arguments"
        prompt = "test_simple_prompt" if "test_simple_prompt" in prompts else prompts[0]

        tool_direct = support.dump(await direct.call_tool(tool, {}))
        read_direct = support.dump(await direct.read_resource(uri))
        prompt_direct = support.dump(await direct.get_prompt(prompt))

    async with support.http_session(gateway.url) as gw:
        tool_gw = support.dump(await gw.call_tool(f"demo__{tool}", {}))
        read_gw = support.dump(await gw.read_resource(f"demo+{uri}"))
        prompt_gw = support.dump(await gw.get_prompt(f"demo__{prompt}"))

    assert not tool_gw.get("isError"), tool_gw
    assert support.strip_uri_prefixes(tool_gw, PREFIX) == tool_direct
    assert read_gw["contents"][0]["uri"] == f"demo+{uri}"
    assert support.strip_uri_prefixes(read_gw, PREFIX) == read_direct
    assert support.strip_uri_prefixes(prompt_gw, PREFIX) == prompt_direct


async def test_env_expansion_in_http_backend(start_gateway: StartGateway, demo_http: str) -> None:
    """`${VAR}` in `url` and `headers` is read from the gateway's environment."""
    config = support.gateway_toml(
        {"remote": {"type": "http", "url": "${E2E_DEMO_URL}", "headers": {"X-Api-Key": "${E2E_API_KEY}"}}}
    )
    gateway = start_gateway(config, env={"E2E_DEMO_URL": demo_http, "E2E_API_KEY": "secret-e2e"})
    async with support.http_session(gateway.url) as gw:
        names = [t.name for t in await support.all_tools(gw)]
    assert names and all(n.startswith("remote__") for n in names), names
