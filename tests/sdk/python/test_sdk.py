"""Mem0's official Python SDK (mem0ai, pinned in requirements.txt), unchanged, against this server:
every call the SDK has, with real API keys, checking what comes back. Run by
scripts/clients.sh, which starts the server (MEM0_TEST_URL, MEM0_TEST_ADMIN_KEY) with a fake
OpenAI-compatible LLM behind it (tests/sdk/fake_openai.py)."""

import asyncio
import json
import logging
import os
import sys
import time
import traceback
import urllib.request
import uuid

from mem0 import AsyncMemoryClient, MemoryClient
from mem0.exceptions import AuthenticationError, MemoryError, MemoryNotFoundError, ValidationError

URL = os.environ["MEM0_TEST_URL"]
ADMIN_KEY = os.environ["MEM0_TEST_ADMIN_KEY"]
RUN = uuid.uuid4().hex[:8]
# The SDK logs every failed call; the expected ones would only clutter the output.
logging.getLogger("mem0").setLevel(logging.CRITICAL)

# Real assistant replies are long: 500 to 3,000 characters.
LONG_REPLY = (
    "Here is a plan for your week in Lisbon. On Monday, start in Alfama: walk up to the Castelo de "
    "São Jorge early, before the tour groups arrive, then wander down through the lanes to the "
    "Sé cathedral. For lunch, the tascas around Largo de São Miguel serve grilled sardines in "
    "season. "
) * 8
LONG_REPLY = LONG_REPLY.strip()  # stored texts are trimmed


def create_key(body):
    """A key from our own admin API (Mem0's SDKs have no call for it)."""
    request = urllib.request.Request(
        f"{URL}/api-keys",
        data=json.dumps(body).encode(),
        headers={"x-api-key": ADMIN_KEY, "content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)["key"]


def expect_error(kind, call, text=None):
    try:
        call()
    except kind as error:
        if text is not None:
            assert text in str(error), f"{text!r} not in {error}"
        return error
    raise AssertionError(f"expected {kind.__name__}")


def test_constructor_checks_the_key():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    assert client.org_id == "default" and client.project_id == "default", (client.org_id, client.project_id)
    error = expect_error(ValueError, lambda: MemoryClient(api_key="m0sk_not-a-key", host=URL))
    assert "invalid or revoked api key" in str(error), error


def test_memories_round_trip():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    alice = f"alice-{RUN}"
    # Mem0's default: infer=true, facts extracted by the (fake) LLM.
    added = client.add("I moved to Lisbon last year and I love pizza", user_id=alice)
    assert added["status"] == "SUCCEEDED", added
    facts = sorted(item["memory"] for item in added["results"])
    assert facts == ["User lives in Lisbon", "User loves pizza"], added
    assert all(item["event"] == "ADD" and item["data"]["memory"] == item["memory"] for item in added["results"])
    # Verbatim, a long assistant turn and metadata; scope ids in `filters` as the typed options put them.
    verbatim = client.add(
        [{"role": "user", "content": "Plan my week, please"}, {"role": "assistant", "content": LONG_REPLY}],
        filters={"user_id": alice},
        infer=False,
        metadata={"topic": "travel"},
    )
    assert [item["memory"] for item in verbatim["results"]] == ["Plan my week, please", LONG_REPLY], verbatim

    found = client.search("Which city does the user live in?", filters={"user_id": alice})
    assert found["results"][0]["memory"] == "User lives in Lisbon", found
    assert all(0.0 <= item["score"] <= 1.0 for item in found["results"]), found
    top = client.search("Which city does the user live in?", filters={"user_id": alice}, top_k=1)
    assert len(top["results"]) == 1, top
    travel = client.search(
        "plan for the week", filters={"AND": [{"user_id": alice}, {"metadata": {"topic": "travel"}}]}
    )
    assert {item["memory"] for item in travel["results"]} <= {"Plan my week, please", LONG_REPLY}, travel
    assert travel["results"], travel
    only_fields = client.search("pizza", filters={"user_id": alice}, fields=["memory"])
    assert set(only_fields["results"][0]) == {"id", "memory"}, only_fields

    everything = client.get_all(filters={"user_id": alice})
    assert everything["count"] == 4 and len(everything["results"]) == 4, everything
    assert everything["next"] is None and everything["previous"] is None, everything
    first = client.get_all(filters={"user_id": alice}, page=1, page_size=3)
    second = client.get_all(filters={"user_id": alice}, page=2, page_size=3)
    assert (first["count"], len(first["results"]), len(second["results"])) == (4, 3, 1), (first, second)
    assert first["next"].endswith("page=2&page_size=3") and second["previous"].endswith("page=1&page_size=3")
    paged_ids = [item["id"] for item in first["results"] + second["results"]]
    assert paged_ids == [item["id"] for item in everything["results"]], "pages list what one listing lists"
    newest_first = [item["created_at"] for item in everything["results"]]
    assert newest_first == sorted(newest_first, reverse=True), newest_first

    memory_id = next(item["id"] for item in everything["results"] if item["memory"] == "User loves pizza")
    memory = client.get(memory_id)
    assert (memory["memory"], memory["user_id"], memory["app_id"]) == ("User loves pizza", alice, None), memory
    updated = client.update(memory_id, text="User loves pizza with olives", metadata={"checked": True})
    assert updated["memory"] == updated["text"] == "User loves pizza with olives", updated
    assert updated["metadata"]["checked"] is True, updated
    expiring = client.update(memory_id, expiration_date="2099-12-31")
    assert expiring["expiration_date"] == "2099-12-31", expiring
    cleared = client.update(memory_id, expiration_date=None)
    assert cleared["expiration_date"] is None, cleared
    history = client.history(memory_id)
    assert [entry["event"] for entry in history][:2] == ["ADD", "UPDATE"], history
    assert history[1]["old_memory"] == "User loves pizza", history
    assert history[1]["new_memory"] == "User loves pizza with olives", history

    users = client.users()
    mine = [entity for entity in users["results"] if entity["name"] == alice]
    assert mine and mine[0]["type"] == "user" and mine[0]["total_memories"] == 4, users

    assert client.delete(memory_id) == {"message": "Memory deleted successfully!"}
    expect_error(MemoryNotFoundError, lambda: client.get(memory_id))
    assert client.history(memory_id)[-1]["event"] == "DELETE", "history outlives the memory"
    removed = client.delete_all(user_id=alice)
    assert removed["deleted"] == 3, removed
    assert client.get_all(filters={"user_id": alice})["count"] == 0


def test_bad_input_is_a_validation_error():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    expect_error(ValidationError, lambda: client.add("no scope", infer=False), "user_id")
    expect_error(ValidationError, lambda: client.get("not-a-uuid"), "memory_id")
    expect_error(ValidationError, lambda: client.get_all(filters={"user_id": "a"}, page_size=5000), "page_size")
    expect_error(ValidationError, lambda: client.delete_all(), "user_id")


def test_bound_and_read_only_keys():
    admin = MemoryClient(api_key=ADMIN_KEY, host=URL)
    bob, carol = f"bob-{RUN}", f"carol-{RUN}"
    admin.add("Carol's secret", user_id=carol, infer=False)
    bob_key = create_key({"label": "bob", "role": "write", "user_ids": [bob]})
    client = MemoryClient(api_key=bob_key, host=URL)
    mine = client.add("I am vegetarian", user_id=bob)
    assert [item["memory"] for item in mine["results"]] == ["User is vegetarian"], mine
    assert client.search("diet", filters={"user_id": bob})["results"][0]["memory"] == "User is vegetarian"
    # A key bound to bob reaches nothing else, whichever way the SDK names the scope.
    expect_error(AuthenticationError, lambda: client.search("secret", filters={"user_id": carol}))
    expect_error(AuthenticationError, lambda: client.get_all(filters={"user_id": carol}))
    expect_error(AuthenticationError, lambda: client.add("hi", user_id=carol, infer=False))
    carol_id = admin.get_all(filters={"user_id": carol})["results"][0]["id"]
    expect_error(MemoryNotFoundError, lambda: client.get(carol_id))
    expect_error(AuthenticationError, lambda: client.users())
    reader = MemoryClient(api_key=create_key({"label": "reader", "role": "read"}), host=URL)
    assert reader.get(carol_id)["memory"] == "Carol's secret"
    expect_error(AuthenticationError, lambda: reader.add("x", user_id=carol, infer=False))
    expect_error(AuthenticationError, lambda: reader.delete(carol_id))
    admin.delete_users(user_id=bob)
    admin.delete_users(user_id=carol)
    assert admin.get_all(filters={"user_id": carol})["count"] == 0


def test_unsupported_calls_say_so():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    memory_id = str(uuid.uuid4())
    for call, feature in [
        (lambda: client.batch_update([{"memory_id": memory_id, "text": "x"}]), "batch"),
        (lambda: client.batch_delete([{"memory_id": memory_id}]), "batch"),
        (lambda: client.create_memory_export(schema="{}", user_id="a"), "export"),
        (lambda: client.get_summary(filters={"user_id": "a"}), "summaries"),
        (lambda: client.get_profile("a"), "profiles"),
        (lambda: client.feedback(memory_id=memory_id, feedback="POSITIVE"), "feedback"),
        (lambda: client.add("x", user_id="a", app_id="shop"), "app_id"),
        (lambda: client.search("x", filters={"app_id": "shop"}), "app_id"),
        (lambda: client.delete(memory_id, delete_linked=True), "delete_linked"),
    ]:
        error = expect_error(MemoryError, call, "not supported by this server")
        assert feature in str(error), (feature, error)
        assert error.details.get("code") == "not_implemented", error.details


def test_reset_deletes_every_entity():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    client.add("one", user_id=f"u1-{RUN}", infer=False)
    client.add("two", agent_id=f"a1-{RUN}", infer=False)
    client.add("three", run_id=f"r1-{RUN}", infer=False)
    client.reset()
    assert client.users()["results"] == [], client.users()


def test_async_mode_queues_the_add_as_an_event():
    client = MemoryClient(api_key=ADMIN_KEY, host=URL)
    eve = f"eve-{RUN}"
    queued = client.add("I love pizza", user_id=eve, async_mode=True)
    assert queued["status"] == "PENDING" and queued["event_id"], queued
    request = urllib.request.Request(
        f"{URL}/v1/event/{queued['event_id']}/", headers={"Authorization": f"Token {ADMIN_KEY}"}
    )
    for _ in range(600):
        with urllib.request.urlopen(request) as response:
            event = json.load(response)
        if event["status"] in ("SUCCEEDED", "FAILED"):
            break
        time.sleep(0.05)
    assert event["status"] == "SUCCEEDED", event
    assert [item["data"]["memory"] for item in event["results"]] == ["User loves pizza"], event
    assert client.search("food", filters={"user_id": eve})["results"][0]["memory"] == "User loves pizza"
    client.delete_all(user_id=eve)


def test_async_client():
    async def run():
        client = AsyncMemoryClient(api_key=ADMIN_KEY, host=URL)
        dana = f"dana-{RUN}"
        added = await client.add("I love pizza", user_id=dana)
        assert [item["memory"] for item in added["results"]] == ["User loves pizza"], added
        found = await client.search("food", filters={"user_id": dana})
        assert found["results"][0]["memory"] == "User loves pizza", found
        listed = await client.get_all(filters={"user_id": dana})
        assert listed["count"] == 1, listed
        await client.delete_all(user_id=dana)

    asyncio.run(run())


def main():
    failed = 0
    tests = [(name, test) for name, test in globals().items() if name.startswith("test_")]
    for name, test in tests:
        try:
            test()
            print(f"ok      {name}")
        except Exception:
            failed += 1
            print(f"FAILED  {name}")
            traceback.print_exc()
    print(f"python sdk: {len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
