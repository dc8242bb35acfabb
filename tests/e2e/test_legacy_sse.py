"""A real legacy HTTP+SSE (2024-11-05) backend: server-everything in `sse` mode behind the
gateway, both as `type = "sse"` and as `type = "http"` (the POST of `initialize` is refused,
so the gateway falls back to the legacy transport). The official Python SDK is the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import support
from support import ServerProcess, StartGateway

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def everything_sse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    node = support.system_node()
    if node is None or not support.EVERYTHING_JS.exists():
        pytest.fail("server-everything needs node and tests/node_modules (scripts/test.sh installs them)")
    port = support.free_port()
    proc = ServerProcess("server-everything sse", [node, str(support.EVERYTHING_JS), "sse"], port,
                         tmp_path / "everything-sse.log", {"PORT": str(port)})
    try:
        proc.wait_for_port()
        yield f"http://127.0.0.1:{port}/sse"
    finally:
        proc.stop()


@pytest.mark.parametrize("kind", ["sse", "http"])
async def test_legacy_backend_through_the_gateway(start_gateway: StartGateway, everything_sse: str, kind: str) -> None:
    gw = start_gateway({"old": {"type": kind, "url": everything_sse, "mode": "shared"}})
    async with support.http_session(gw.url) as host:
        tools = [t.name for t in await support.all_tools(host)]
        assert "old__echo" in tools, tools
        result = await host.call_tool("old__echo", {"message": "through the legacy transport"})
        assert result.content[0].text == "Echo: through the legacy transport"
        result = await host.call_tool("old__get-sum", {"a": 2, "b": 3})
        assert "5" in result.content[0].text
        resources = [r.uri for r in await support.all_resources(host)]
        assert resources and all(u.startswith("old+") for u in resources), resources
        read = await host.read_resource(resources[0])
        assert read.contents and read.contents[0].uri == resources[0]
