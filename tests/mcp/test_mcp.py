"""The Model Context Protocol endpoint through the official Python MCP client (mcp, pinned in
requirements.txt): the tools over streamable HTTP at /mcp with real API keys (a key bound to a
user reaches only that user's memories), and over stdio (`mem0-server mcp --stdio`) as a
desktop client launches it. Run by scripts/clients.sh, which starts the server (MEM0_TEST_URL,
MEM0_TEST_ADMIN_KEY, MEM0_TEST_STORE, MEM0_TEST_DATA: its data directory, MEM0_SERVER_BIN: the
binary)."""

import asyncio
import json
import os
import secrets
import sys
import tempfile
import traceback
import urllib.error
import urllib.request
import uuid

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL = os.environ["MEM0_TEST_URL"]
ADMIN_KEY = os.environ["MEM0_TEST_ADMIN_KEY"]
SERVER_DATA = os.environ["MEM0_TEST_DATA"]
SERVER_BIN = os.environ["MEM0_SERVER_BIN"]
SERVER_STORE = os.environ["MEM0_TEST_STORE"]
RUN = uuid.uuid4().hex[:8]
TOOLS = {
    "add_memory",
    "search_memories",
    "list_memories",
    "get_memory",
    "update_memory",
    "delete_memory",
    "memory_history",
}
# Real assistant replies are long: 500 to 3,000 characters.
LONG_REPLY = " ".join(
    ["The flight to Oslo leaves at 07:40 from gate B12; check in online the evening before, "
     "and keep the power bank in your cabin bag, since it cannot travel in the hold."] * 9
)


def create_key(body):
    request = urllib.request.Request(
        f"{URL}/api-keys",
        data=json.dumps(body).encode(),
        headers={"x-api-key": ADMIN_KEY, "content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)["key"]


def over_http(key):
    http = create_mcp_http_client(headers={"Authorization": f"Token {key}"})
    return Client(streamable_http_client(f"{URL}/mcp", http_client=http))


async def call(client, tool, arguments):
    """The tool's JSON answer; a tool error raises, naming its code."""
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    if result.is_error:
        raise ToolError(text)
    return json.loads(text)


class ToolError(Exception):
    pass


async def expect_tool_error(client, tool, arguments, code):
    try:
        await call(client, tool, arguments)
    except ToolError as error:
        assert str(error).startswith(f"{code}:"), error
        return
    raise AssertionError(f"{tool} {arguments}: expected {code}")


async def test_tools_describe_themselves():
    async with over_http(ADMIN_KEY) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS, tools.keys()
        for tool in tools.values():
            assert len(tool.description) > 30, tool
            assert tool.input_schema["type"] == "object", tool.input_schema
        assert tools["search_memories"].input_schema["required"] == ["query"], tools["search_memories"].input_schema
        assert {"user_id", "agent_id", "run_id", "top_k"} <= set(tools["search_memories"].input_schema["properties"])
        assert tools["search_memories"].annotations.read_only_hint is True
        assert tools["delete_memory"].annotations.destructive_hint is True


async def test_every_tool_round_trip():
    user = f"ola-{RUN}"
    async with over_http(ADMIN_KEY) as client:
        # With an LLM configured (here a fake), facts are extracted by default.
        extracted = await call(client, "add_memory", {"text": "I love pizza", "user_id": user})
        assert [item["memory"] for item in extracted["results"]] == ["User loves pizza"], extracted
        added = await call(client, "add_memory", {"text": "Ola is allergic to peanuts", "user_id": user, "infer": False})
        assert [item["memory"] for item in added["results"]] == ["Ola is allergic to peanuts"], added
        conversation = await call(client, "add_memory", {
            "messages": [{"role": "user", "content": "When is my flight?"}, {"role": "assistant", "content": LONG_REPLY}],
            "user_id": user,
            "metadata": {"topic": "travel"},
            "infer": False,
        })
        assert len(conversation["results"]) == 2, conversation

        found = await call(client, "search_memories", {"query": "which food must Ola avoid?", "user_id": user})
        assert found["results"][0]["memory"] == "Ola is allergic to peanuts", found
        assert 0 < found["results"][0]["score"] <= 1, found
        travel = await call(client, "search_memories", {
            "query": "gate of the flight", "user_id": user, "filters": {"topic": "travel"}, "top_k": 1,
        })
        assert [item["memory"] for item in travel["results"]] == [LONG_REPLY], travel

        first = await call(client, "list_memories", {"user_id": user, "page_size": 3})
        second = await call(client, "list_memories", {"user_id": user, "page_size": 3, "cursor": first["next"]})
        assert len(first["results"]) == 3 and len(second["results"]) == 1 and second["next"] is None, (first, second)

        memory_id = added["results"][0]["id"]
        assert (await call(client, "get_memory", {"memory_id": memory_id}))["memory"] == "Ola is allergic to peanuts"
        updated = await call(client, "update_memory", {
            "memory_id": memory_id, "text": "Ola is allergic to peanuts and cashews", "metadata": {"checked": True},
        })
        assert updated["memory"] == "Ola is allergic to peanuts and cashews" and updated["metadata"]["checked"], updated
        history = (await call(client, "memory_history", {"memory_id": memory_id}))["history"]
        assert [entry["event"] for entry in history] == ["ADD", "UPDATE"], history
        assert history[1]["old_memory"] == "Ola is allergic to peanuts", history
        assert (await call(client, "delete_memory", {"memory_id": memory_id}))["deleted"] == memory_id
        await expect_tool_error(client, "get_memory", {"memory_id": memory_id}, "memory_not_found")
        await expect_tool_error(client, "get_memory", {"memory_id": "not-an-id"}, "invalid_memory_id")
        await expect_tool_error(client, "add_memory", {"user_id": user}, "validation_failed")
        await expect_tool_error(client, "search_memories", {"query": "anything"}, "validation_failed")


async def test_a_bound_key_stays_in_its_scope():
    pia, quinn = f"pia-{RUN}", f"quinn-{RUN}"
    async with over_http(ADMIN_KEY) as admin:
        quinns = await call(admin, "add_memory", {"text": "Quinn's door code is 4711", "user_id": quinn, "infer": False})
    async with over_http(create_key({"label": "pia", "role": "write", "user_ids": [pia]})) as client:
        # No user_id: the key's user is the default.
        mine = await call(client, "add_memory", {"text": "Pia prefers window seats", "infer": False})
        assert mine["results"][0]["memory"] == "Pia prefers window seats", mine
        found = await call(client, "search_memories", {"query": "seat preference"})
        assert [item["user_id"] for item in found["results"]] == [pia], found
        await expect_tool_error(client, "search_memories", {"query": "door code", "user_id": quinn}, "forbidden")
        await expect_tool_error(client, "list_memories", {"user_id": quinn}, "forbidden")
        await expect_tool_error(client, "get_memory", {"memory_id": quinns["results"][0]["id"]}, "memory_not_found")
        await expect_tool_error(client, "delete_memory", {"memory_id": quinns["results"][0]["id"]}, "memory_not_found")
    async with over_http(create_key({"label": "reader", "role": "read"})) as reader:
        await expect_tool_error(reader, "add_memory", {"text": "x", "user_id": quinn, "infer": False}, "forbidden")
        assert (await call(reader, "get_memory", {"memory_id": quinns["results"][0]["id"]}))["user_id"] == quinn


async def test_no_key_no_tools():
    request = urllib.request.Request(
        f"{URL}/mcp",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream"},
        method="POST",
    )
    try:
        urllib.request.urlopen(request)
    except urllib.error.HTTPError as error:
        assert error.code == 401, error.code
        assert json.load(error)["code"] == "unauthenticated"
    else:
        raise AssertionError("/mcp answered without a key")
    try:
        async with Client(f"{URL}/mcp") as client:
            await client.list_tools()
    except Exception:  # the client reports the refusal its own way
        return
    raise AssertionError("listed tools without a key")


def stdio_server(data, key):
    return StdioServerParameters(
        command=SERVER_BIN,
        args=["mcp", "--stdio"],
        cwd=os.getcwd(),
        env={
            "PATH": os.environ["PATH"],
            "RUST_LOG": "warn",
            "ADMIN_API_KEY": ADMIN_KEY,
            "MEM0_API_KEY": key,
            "MEM0__AUTH__DISABLED": "false",
            "MEM0__MEMORY__VECTOR_STORE__PROVIDER": "sqlite",
            "MEM0__MEMORY__VECTOR_STORE__SQLITE__PATH": f"{data}/memories.db",
            "MEM0__MEMORY__HISTORY__PROVIDER": "sqlite",
            "MEM0__MEMORY__HISTORY__PATH": f"{data}/history.db",
            "MEM0__CONFIGURE__STATE_PATH": f"{data}/runtime-config.json",
        },
    )


async def test_stdio():
    with tempfile.TemporaryDirectory() as data:
        async with Client(stdio_server(data, ADMIN_KEY)) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            await call(client, "add_memory", {"text": "Rae plays the cello", "user_id": "rae", "infer": False})
            found = await call(client, "search_memories", {"query": "which instrument?", "user_id": "rae"})
            assert found["results"][0]["memory"] == "Rae plays the cello", found
        # What the process wrote is there for the next one (a client restart).
        async with Client(stdio_server(data, ADMIN_KEY)) as client:
            listed = await call(client, "list_memories", {"user_id": "rae"})
            assert [item["memory"] for item in listed["results"]] == ["Rae plays the cello"], listed


async def test_stdio_refuses_a_bad_key_and_a_store_in_use():
    cases = [(None, "m0sk_" + secrets.token_hex(8), "invalid or revoked api key")]
    if SERVER_STORE == "sqlite":
        # The running server holds the embedded store: a second process would serve stale caches.
        cases.append((SERVER_DATA, ADMIN_KEY, "another mem0-server process"))
    for data, key, message in cases:
        with tempfile.TemporaryDirectory() as scratch:
            params = stdio_server(data or scratch, key)
            process = await asyncio.create_subprocess_exec(
                params.command, *params.args, cwd=params.cwd, env=params.env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            _, stderr = await asyncio.wait_for(process.communicate(b""), timeout=60)
            assert process.returncode != 0, stderr
            assert message in stderr.decode(), stderr.decode()


async def main():
    failed = 0
    tests = [(name, test) for name, test in globals().items() if name.startswith("test_")]
    for name, test in tests:
        try:
            await test()
            print(f"ok      {name}")
        except Exception:
            failed += 1
            print(f"FAILED  {name}")
            traceback.print_exc()
    print(f"mcp client: {len(tests) - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(1 if asyncio.run(main()) else 0)
