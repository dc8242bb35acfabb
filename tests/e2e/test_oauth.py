"""OAuth end to end: a real authorization server
(`oidc-provider`, tests/oidc/provider.mjs) and the official Python SDK's OAuth client.

The SDK client discovers everything from the gateway's 401 (Protected Resource Metadata →
authorization server metadata → client-credentials token for the gateway's resource) and
calls a tool. Without a token the gateway answers the RFC 9728 challenge; a token without
the required scope gets 403 insufficient_scope. Two principals with different scopes see
different tool lists and are refused each other's sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import httpx2
import pytest

import support
from mcp import ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

pytestmark = [pytest.mark.timeout(90), pytest.mark.anyio]

PROVIDER_JS = support.TESTS / "oidc" / "provider.mjs"
CLIENTS = [
    {"client_id": "mcp-host", "client_secret": "host-secret", "scope": "mcp:tools"},
    {"client_id": "mcp-admin", "client_secret": "admin-secret", "scope": "mcp:tools tools:admin"},
    {"client_id": "mcp-other", "client_secret": "other-secret", "scope": "mcp:other"},
]
SECRETS = {c["client_id"]: c["client_secret"] for c in CLIENTS}


def provider_node() -> str:
    """oidc-provider 9 wants Node 22: the pinned one in tests/node_modules, else `node`."""
    if support.NODE22.exists():
        return str(support.NODE22)
    node = support.system_node()
    if node is None:
        pytest.fail("no Node.js found for oidc-provider (run npm ci --prefix tests)")
    return node


@pytest.fixture
def oidc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """oidc-provider on a free loopback port; yields its issuer URL; stopped at teardown."""
    if not (support.NODE_MODULES / "oidc-provider").exists():
        pytest.fail("tests/node_modules/oidc-provider is missing: run `npm ci --prefix tests`")
    port = support.free_port()
    argv = [provider_node(), str(PROVIDER_JS), str(port), json.dumps(CLIENTS)]
    proc = support.ServerProcess("oidc-provider", argv, port, tmp_path / "oidc-provider.log")
    request.node._mcpgate_servers = [*getattr(request.node, "_mcpgate_servers", []), proc]
    try:
        proc.wait_for_port()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path, mcpgate_bin: Path, oidc: str) -> Iterator[str]:
    """The gateway as a protected resource of `oidc`, over the demo backend; yields its MCP URL.

    Policy: `mcp:tools` alone shows one demo tool; `tools:admin` shows everything.
    """
    port = support.free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp_path / "mcpgate-oauth.toml"
    config.write_text(
        "\n".join(
            [
                "[server]",
                f'listen = "127.0.0.1:{port}"',
                "[auth]",
                f'resource = "{url}"',
                f'issuers = ["{oidc}"]',
                'required_scopes = ["mcp:tools"]',
                "[policy]",
                'default = "deny"',
                "[[policy.rules]]",
                'scopes = ["mcp:tools"]',
                'tools = ["test_simple_text"]',
                "[[policy.rules]]",
                'scopes = ["tools:admin"]',
                "[backends.demo]",
                'type = "stdio"',
                f"command = {json.dumps(str(mcpgate_bin))}",
                'args = ["demo-server"]',
                "",
            ]
        )
    )
    argv = [str(mcpgate_bin), "serve", "--config", str(config)]
    proc = support.ServerProcess("mcpgate serve (oauth)", argv, port, tmp_path / "mcpgate-oauth.log")
    request.node._mcpgate_servers = [*getattr(request.node, "_mcpgate_servers", []), proc]
    try:
        proc.wait_for_port()
        yield url
    finally:
        proc.stop()


class MemoryStorage:
    """Token storage for one test (the SDK's TokenStorage protocol)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def token_for(oidc: str, client_id: str, resource: str, scope: str) -> str:
    """A client-credentials access token straight from the authorization server."""
    r = httpx2.post(
        f"{oidc}/token",
        data={"grant_type": "client_credentials", "scope": scope, "resource": resource},
        auth=(client_id, SECRETS[client_id]),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()["access_token"]


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def www_authenticate(r: httpx2.Response) -> dict[str, str]:
    value = r.headers.get("www-authenticate", "")
    assert value.startswith("Bearer "), value
    out = {}
    for part in value[len("Bearer ") :].split(", "):
        k, _, v = part.partition("=")
        out[k] = v.strip('"')
    return out


async def test_sdk_oauth_client_discovers_and_calls_a_tool(gateway: str, oidc: str) -> None:
    storage = MemoryStorage()
    auth = ClientCredentialsOAuthProvider(
        server_url=gateway,
        storage=storage,
        client_id="mcp-host",
        client_secret=SECRETS["mcp-host"],
        issuer=oidc,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        async with streamable_http_client(gateway, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = [t.name for t in await support.all_tools(session)]
                assert tools == ["demo__test_simple_text"]
                result = await session.call_tool("demo__test_simple_text", {})
                assert not result.is_error
                assert result.content[0].text
    # What the SDK discovered and obtained: a token for exactly the gateway's resource.
    assert storage.tokens is not None and "mcp:tools" in (storage.tokens.scope or "")
    assert str(auth.context.protected_resource_metadata.resource) == gateway
    assert str(auth.context.oauth_metadata.issuer).rstrip("/") == oidc


async def test_challenges_without_token_and_without_scope(gateway: str, oidc: str) -> None:
    prm_url = gateway.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(gateway, json=INIT, headers=MCP_HEADERS)
        assert r.status_code == 401
        challenge = www_authenticate(r)
        assert challenge["resource_metadata"] == prm_url
        assert challenge["scope"] == "mcp:tools"
        assert "error" not in challenge
        prm = (await http.get(prm_url)).json()
        assert prm["resource"] == gateway
        assert prm["authorization_servers"] == [oidc]

        weak = token_for(oidc, "mcp-other", gateway, "mcp:other")
        r = await http.post(gateway, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {weak}"})
        assert r.status_code == 403
        challenge = www_authenticate(r)
        assert challenge["error"] == "insufficient_scope"
        assert challenge["scope"] == "mcp:tools"

        # A token the AS issued for another resource is not for us.
        elsewhere = token_for(oidc, "mcp-host", "http://127.0.0.1:1/other", "mcp:tools")
        r = await http.post(gateway, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {elsewhere}"})
        assert r.status_code == 401
        assert www_authenticate(r)["error"] == "invalid_token"


async def _tools_with_token(gateway: str, token: str) -> list[str]:
    """The SDK client with a fixed bearer token: the exposed tool names."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(gateway, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return sorted(t.name for t in await support.all_tools(session))


async def test_two_principals_see_different_tools_and_not_each_others_sessions(gateway: str, oidc: str) -> None:
    host = token_for(oidc, "mcp-host", gateway, "mcp:tools")
    admin = token_for(oidc, "mcp-admin", gateway, "mcp:tools tools:admin")
    host_tools = await _tools_with_token(gateway, host)
    admin_tools = await _tools_with_token(gateway, admin)
    assert host_tools == ["demo__test_simple_text"]
    assert len(admin_tools) > 5 and "demo__test_simple_text" in admin_tools

    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(gateway, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {host}"})
        assert r.status_code == 200
        sid = r.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        session_headers = {**MCP_HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        r = await http.post(gateway, json=listing, headers={**session_headers, "Authorization": f"Bearer {admin}"})
        assert r.status_code == 404, "another principal must not reach the session"
        r = await http.post(gateway, json=listing, headers={**session_headers, "Authorization": f"Bearer {host}"})
        assert r.status_code == 200
