"""A real third-party 2026-07-28 backend for the shim's e2e test: a Python `mcp` 2.3 `MCPServer`
over stdio whose tools ask their client through `Resolve(...)` dependencies. The SDK serves both
eras on one pipe; on the 2026-07-28 wire (what mcpgate speaks once `server/discover` names it)
every ask is batched into an `input_required` result and resumed from `inputResponses` and the
SDK's own sealed `requestState` — no server→client request is ever sent.

Tools: `greet` (form elicitation), `add` (sampling), `where` (roots), `all_at_once` (the three
in one round), `two_steps` (an elicitation, then a sampling request built from its answer: two
rounds).

The SDK seals its `requestState` under a key drawn at start (one process only) unless
`MRTR_STATE_KEY` (text of at least 32 bytes) is set: then every process started with the same key opens what
another sealed, as the SDK asks of multi-instance deployments (tests/lb runs one child per
gateway replica).

Run: `python mrtr_server.py` (stdio).
"""

from __future__ import annotations

import os
from typing import Annotated

from mcp.server.mcpserver import Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.server.request_state import RequestStateSecurity
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("Your name?", Name)


def ask_sum() -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text="2+2?"))], max_tokens=10)


def ask_roots() -> ListRoots:
    return ListRoots()


def ask_greeting(name: Annotated[Name, Resolve(ask_name)]) -> Sample:
    prompt = f"Write a greeting for {name.name}"
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=20)


def _text(result: CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, TextContent) else str(content)


_key = os.environ.get("MRTR_STATE_KEY")
server = MCPServer(
    "py-mrtr", request_state_security=RequestStateSecurity(keys=[_key]) if _key else None
)


@server.tool()
def greet(name: Annotated[Name, Resolve(ask_name)]) -> str:
    """Greets whoever the client names."""
    return f"hello {name.name}"


@server.tool()
def add(answer: Annotated[CreateMessageResult, Resolve(ask_sum)]) -> str:
    """Asks the client's model what 2+2 is."""
    return f"the model says {_text(answer)}"


@server.tool()
def where(roots: Annotated[ListRootsResult, Resolve(ask_roots)]) -> str:
    """Lists the client's roots."""
    return "roots: " + ",".join(str(r.uri) for r in roots.roots)


@server.tool()
def all_at_once(
    name: Annotated[Name, Resolve(ask_name)],
    answer: Annotated[CreateMessageResult, Resolve(ask_sum)],
    roots: Annotated[ListRootsResult, Resolve(ask_roots)],
) -> str:
    """Asks for a name, a sample and the roots in one round."""
    return f"{name.name} / {_text(answer)} / {len(roots.roots)} roots"


@server.tool()
def two_steps(greeting: Annotated[CreateMessageResult, Resolve(ask_greeting)]) -> str:
    """Asks for a name, then for a greeting written for it: two rounds."""
    return f"greeting: {_text(greeting)}"


if __name__ == "__main__":
    server.run()
