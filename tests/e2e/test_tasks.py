"""Tasks (2025-11-25) end to end: the official Python SDK as the host, server-everything's
real task tool `simulate-research-query` (taskSupport "required") behind the gateway over
stdio. The task id is namespaced by backend, `tasks/get` and `tasks/result` reach the backend,
and another session can neither see nor use the task.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import support
from support import Gateway, StartGateway, StdioCommand

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOOL = "everything__simulate-research-query"


@pytest.fixture
def gateway(start_gateway: StartGateway, everything: StdioCommand) -> Gateway:
    return start_gateway({"everything": everything.backend()})


async def test_a_real_task_runs_through_the_gateway(gateway: Gateway) -> None:
    async with support.http_session(gateway.url) as host, support.http_session(gateway.url) as other:
        caps = host.server_capabilities
        assert caps is not None and caps.tasks is not None, caps
        tools = {t.name: t for t in await support.all_tools(host)}
        assert TOOL in tools, sorted(tools)
        assert tools[TOOL].execution is not None and tools[TOOL].execution.task_support == "required"

        # SDK 2.3.0 validates every tools/call answer as a CallToolResult and has no
        # client-side task API, so the task-augmented call goes out raw.
        params = types.CallToolRequestParams(
            name=TOOL, arguments={"topic": "gateways"}, task=types.TaskMetadata(ttl=60000))
        raw = await host._dispatcher.send_raw_request(  # noqa: SLF001
            "tools/call", params.model_dump(by_alias=True, mode="json", exclude_none=True), {})
        created = types.CreateTaskResult.model_validate(raw, by_name=False)
        task_id = created.task.task_id
        assert task_id.startswith("everything:"), task_id
        assert created.task.status == "working"

        status = await host.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult)
        assert status.task_id == task_id
        assert status.status in ("working", "completed")

        listed = await host.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert [t.task_id for t in listed.tasks] == [task_id]

        # Another session: the task does not exist for it.
        with pytest.raises(MCPError) as refused:
            await other.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult)
        assert refused.value.error.code == -32602
        theirs = await other.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert theirs.tasks == []

        with anyio.fail_after(20):
            while status.status == "working":
                await anyio.sleep(0.5)
                status = await host.send_request(
                    types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult)
        assert status.status == "completed", status

        payload = await host.send_request(
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
            types.CallToolResult,
        )
        text = payload.content[0].text
        assert "Research Report: gateways" in text, text
        related = (payload.meta or {}).get("io.modelcontextprotocol/related-task")
        assert related == {"taskId": task_id}, payload.meta


async def test_input_required_elicitation_travels_on_the_task_result_stream(
    start_gateway: StartGateway, everything: StdioCommand
) -> None:
    """An ambiguous query moves the task to input_required; the backend's elicitation/create
    (tied to the task) reaches the host while it waits on tasks/result, with the namespaced
    task id, and the host's answer completes the task."""
    gateway = start_gateway({"everything": everything.backend(mode="per_session")})
    asked: list[types.ElicitRequestParams] = []

    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"interpretation": "technical"})

    async with streamable_http_client(gateway.url) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as host:
            await host.initialize()
            params = types.CallToolRequestParams(
                name=TOOL, arguments={"topic": "python", "ambiguous": True}, task=types.TaskMetadata(ttl=60000))
            raw = await host._dispatcher.send_raw_request(  # noqa: SLF001 - see above
                "tools/call", params.model_dump(by_alias=True, mode="json", exclude_none=True), {})
            task_id = types.CreateTaskResult.model_validate(raw, by_name=False).task.task_id
            with anyio.fail_after(30):
                payload = await host.send_request(
                    types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
                    types.CallToolResult,
                )
    assert len(asked) == 1, asked
    related = (asked[0].meta or {}).get("io.modelcontextprotocol/related-task")
    assert related == {"taskId": task_id}, asked[0].meta
    text = payload.content[0].text
    assert "technical" in text, text
