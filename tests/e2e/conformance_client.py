"""The conformance suite's client for its client scenarios, with mcpgate as the MCP client.

`conformance client --command "python conformance_client.py" --scenario S` starts a test
MCP server and runs `python conformance_client.py <server-url>` with
`MCP_CONFORMANCE_SCENARIO=S`. For a gateway the client under test is mcpgate: this script
writes a gateway config with one `type = "http"` backend at that URL (`prefix = ""`,
`mode = "per_session"`), starts `$MCPGATE_BIN serve` on a free port, and drives one host
session through the gateway with the official Python SDK as the scenario asks:

  initialize                            initialize, list tools
  tools_call                            call add_numbers(a, b)
  elicitation-sep1034-client-defaults   declare elicitation; answer the relayed
                                        elicitation/create with accept + the schema's defaults
  sse-retry                             call test_reconnection; the gateway must resume the
                                        backend's closed stream honouring its `retry`

Exit status 0 when the host-side expectations held; the suite judges the rest from what
the test server saw (mcpgate's initialize, its requests, its reconnection timing).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import support  # noqa: E402


async def answer_with_defaults(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    schema: Any = getattr(params, "requested_schema", None) or {}
    if not isinstance(schema, dict):
        schema = support.dump(schema)
    props = schema.get("properties", {})
    content = {name: prop["default"] for name, prop in props.items() if "default" in prop}
    return types.ElicitResult(action="accept", content=content)


async def drive(url: str, scenario: str) -> None:
    elicit = answer_with_defaults if scenario == "elicitation-sep1034-client-defaults" else None
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as host:
            await host.initialize()
            tools = [t.name for t in await support.all_tools(host)]
            print(f"tools through the gateway: {tools}", flush=True)
            if scenario == "initialize":
                return
            if scenario == "tools_call":
                result = await host.call_tool("add_numbers", {"a": 2, "b": 3})
                text = result.content[0].text
                assert "5" in text, text
            elif scenario == "elicitation-sep1034-client-defaults":
                result = await host.call_tool("test_client_elicitation_defaults", {})
                text = result.content[0].text
                assert text.startswith("Elicitation completed"), text
            elif scenario == "sse-retry":
                with anyio.fail_after(15):
                    result = await host.call_tool("test_reconnection", {})
                text = result.content[0].text
                assert "successfully" in text, text
            else:
                raise SystemExit(f"conformance_client.py: scenario {scenario!r} is not supported")
            print(f"result: {text}", flush=True)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: conformance_client.py SERVER_URL (MCP_CONFORMANCE_SCENARIO set)", file=sys.stderr)
        return 2
    server_url = sys.argv[1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    with tempfile.TemporaryDirectory(prefix="mcpgate-conformance-client-") as tmp:
        tmpdir = Path(tmp)
        port = support.free_port()
        config = tmpdir / "mcpgate.toml"
        config.write_text(support.gateway_toml(
            {"target": {"type": "http", "url": server_url, "prefix": "", "mode": "per_session"}},
            {"metrics_listen": "off"},
        ))
        argv = [str(support.mcpgate_bin()), "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
        gateway = support.ServerProcess("mcpgate serve", argv, port, tmpdir / "mcpgate.log")
        ok = False
        try:
            gateway.wait_for_port()
            anyio.run(drive, f"http://127.0.0.1:{port}/mcp", scenario)
            ok = True
        except Exception as e:  # noqa: BLE001 - reported with the gateway's log below
            print(f"conformance_client.py: {scenario}: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            code = gateway.stop()
            if not ok or code != 0:
                print(f"--- mcpgate log (exit {code}) ---\n{gateway.log_text()}", file=sys.stderr)
        return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
