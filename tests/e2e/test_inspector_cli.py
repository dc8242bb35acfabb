"""A second real client: the official MCP Inspector CLI (pinned in
tests/package.json) against the gateway on its shipped default config lists the demo
backend's tools under their namespaced names, calls one, reads a resource through a
template and gets a prompt.
"""

from __future__ import annotations

import json
import subprocess

import pytest

import support
from support import Gateway

pytestmark = [pytest.mark.timeout(120)]

INSPECTOR = support.NODE_MODULES / ".bin" / "mcp-inspector"


def inspector(url: str, *args: str) -> dict:
    node = support.system_node()
    assert node, "no node to run the Inspector CLI"
    proc = subprocess.run(
        [node, str(INSPECTOR), "--cli", url, "--transport", "http", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"inspector {args} failed:\n{proc.stdout}\n{proc.stderr}"
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout
    return json.loads(proc.stdout[start:])


def test_inspector_cli_through_the_gateway(default_gateway: Gateway) -> None:
    url = default_gateway.url
    tools = [t["name"] for t in inspector(url, "--method", "tools/list")["tools"]]
    assert "demo__echo" in tools, tools
    assert all(t.startswith("demo__") for t in tools), tools

    called = inspector(url, "--method", "tools/call", "--tool-name", "demo__echo", "--tool-arg", "text=hello")
    assert called["content"] == [{"type": "text", "text": "hello"}], called

    templates = inspector(url, "--method", "resources/templates/list")["resourceTemplates"]
    template = next(t["uriTemplate"] for t in templates if t["uriTemplate"] == "demo+test://template/{id}/data")
    read = inspector(url, "--method", "resources/read", "--uri", template.replace("{id}", "42"))
    assert read["contents"][0]["uri"] == "demo+test://template/42/data", read
    assert "42" in read["contents"][0]["text"], read

    prompt = inspector(url, "--method", "prompts/get", "--prompt-name", "demo__test_simple_prompt")
    assert prompt["messages"], prompt
