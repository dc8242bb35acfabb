"""A second, independent MCP host through the gateway: the MCP Inspector CLI (TypeScript SDK).

Skipped where the inspector or a Node >= 22 is not available.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import support
from support import StartGateway, StdioCommand

pytestmark = pytest.mark.timeout(60)


def test_inspector_cli_through_gateway(start_gateway: StartGateway, time_server: StdioCommand, tmp_path: Path) -> None:
    node = support.node22()
    if node is None or not support.INSPECTOR_JS.exists():
        pytest.skip("inspector CLI needs tests/node_modules and Node >= 22")
    gateway = start_gateway({"time": time_server.backend()})

    listed = support.run_inspector(node, tmp_path, [gateway.url, "--transport", "http", "--method", "tools/list"])
    assert {t["name"] for t in listed["tools"]} == {"time__get_current_time", "time__convert_time"}

    called = support.run_inspector(
        node,
        tmp_path,
        [gateway.url, "--transport", "http", "--method", "tools/call",
         "--tool-name", "time__get_current_time", "--tool-arg", "timezone=UTC"],
    )
    assert not called.get("isError"), called
    assert json.loads(called["content"][0]["text"])["timezone"] == "UTC"
