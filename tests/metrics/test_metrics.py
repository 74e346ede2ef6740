"""`/metrics` read the way Prometheus reads it: parsed by the Prometheus project's own Python
client (prometheus-client, pinned in requirements.txt). The counters must move by exactly the
requests made, and the number of series must stay bounded while 1,000 distinct memory ids are
read. Run by scripts/clients.sh against a server of its own (MEM0_TEST_URL,
MEM0_TEST_ADMIN_KEY), with the fake OpenAI-compatible LLM of tests/sdk/fake_openai.py behind it
(100 prompt and 20 completion tokens per call)."""

import json
import os
import re
import sys
import traceback
import urllib.error
import urllib.request
import uuid

from prometheus_client.parser import text_string_to_metric_families

URL = os.environ["MEM0_TEST_URL"]
ADMIN_KEY = os.environ["MEM0_TEST_ADMIN_KEY"]
RUN = uuid.uuid4().hex[:8]
REQUESTS = "mem0_http_request_duration_seconds"


def call(method, path, body=None, key=ADMIN_KEY):
    """(status, headers, body text) of one request."""
    headers = {"content-type": "application/json"}
    if key:
        headers["x-api-key"] = key
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{URL}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def scrape():
    """Every sample of /metrics by (name, sorted labels), and the raw text."""
    status, headers, text = call("GET", "/metrics")
    assert status == 200, (status, text)
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers["content-type"]
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, text


def requests_by_route(samples):
    """Request counts by (method, route, status)."""
    counts = {}
    for (name, labels), value in samples.items():
        if name == f"{REQUESTS}_count":
            labels = dict(labels)
            counts[(labels["method"], labels["route"], labels["status"])] = value
    return counts


def delta(after, before):
    keys = set(after) | set(before)
    moved = {key: after.get(key, 0) - before.get(key, 0) for key in keys}
    return {key: value for key, value in moved.items() if value}


def total(samples, name, **wanted):
    """The sum of the samples of `name` whose labels include `wanted`."""
    return sum(
        value
        for (sample, labels), value in samples.items()
        if sample == name and all(dict(labels).get(k) == v for k, v in wanted.items())
    )


def add(user, text, infer=False):
    status, _, body = call(
        "POST", "/memories", {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": infer}
    )
    assert status == 200, (status, body)
    return json.loads(body)


def test_credentials_are_needed():
    status, _, body = call("GET", "/metrics", key=None)
    assert status == 401, (status, body)
    # A tenant's own admin does not see every tenant's figures.
    status, _, body = call("POST", "/api-keys", {"label": f"metrics-{RUN}", "role": "admin", "tenant": f"t-{RUN}"})
    assert status in (200, 201), (status, body)
    status, _, body = call("GET", "/metrics", key=json.loads(body)["key"])
    assert status == 403, (status, body)
    assert json.loads(body)["code"] == "forbidden", body


def test_counters_move_by_exactly_the_requests_made():
    user = f"metrics-{RUN}"
    before, _ = scrape()
    ids = [add(user, f"Fact number {n} about the metrics run {RUN}: the user likes tea.")["results"][0]["id"]
           for n in range(5)]
    for memory_id in ids[:3]:
        status, _, body = call("GET", f"/memories/{memory_id}")
        assert status == 200, (status, body)
    for _ in range(2):
        status, _, body = call("POST", "/search", {"query": "what does the user drink", "user_id": user})
        assert status == 200, (status, body)
    status, _, _ = call("GET", f"/memories/{uuid.uuid4()}")
    assert status == 404
    status, _, _ = call("GET", f"/no-such-route-{RUN}")
    assert status == 404
    add(user, "I had pizza for lunch", infer=True)
    after, _ = scrape()
    moved = delta(requests_by_route(after), requests_by_route(before))
    expected = {
        ("POST", "/memories", "200"): 6,
        ("GET", "/memories/{memory_id}", "200"): 3,
        ("POST", "/search", "200"): 2,
        ("GET", "/memories/{memory_id}", "404"): 1,
        ("GET", "unmatched", "404"): 1,
        ("GET", "/metrics", "200"): 1,  # the first scrape
    }
    assert moved == expected, moved
    # The fake LLM reports 100 + 20 tokens per call; one inferred add made the calls.
    calls = total(after, "mem0_llm_calls_total", tenant="default") - total(before, "mem0_llm_calls_total", tenant="default")
    assert calls >= 1, calls
    prompt = total(after, "mem0_llm_tokens_total", tenant="default", type="prompt") - total(
        before, "mem0_llm_tokens_total", tenant="default", type="prompt")
    completion = total(after, "mem0_llm_tokens_total", tenant="default", type="completion") - total(
        before, "mem0_llm_tokens_total", tenant="default", type="completion")
    assert (prompt, completion) == (100 * calls, 20 * calls), (calls, prompt, completion)
    provider = total(after, "mem0_provider_requests_total", service="llm", outcome="ok") - total(
        before, "mem0_provider_requests_total", service="llm", outcome="ok")
    assert provider == calls, (provider, calls)
    # Each of the six adds stored its memories in one store write.
    applied = total(after, "mem0_store_operation_duration_seconds_count", operation="apply", outcome="ok") - total(
        before, "mem0_store_operation_duration_seconds_count", operation="apply", outcome="ok")
    assert applied == 6, applied
    embedded = total(after, "mem0_embedding_calls_total", outcome="ok") - total(
        before, "mem0_embedding_calls_total", outcome="ok")
    assert embedded >= 8, embedded  # six adds and two search queries at least
    assert total(after, "mem0_db_pool_max_connections") > 0
    assert ("mem0_jobs_open", ()) in after
    assert ("mem0_build_info", (("version", "0.1.0"),)) in after or any(
        name == "mem0_build_info" for name, _ in after)


def test_series_stay_bounded_under_a_thousand_memory_ids():
    user = f"metrics-many-{RUN}"
    messages = [{"role": "user", "content": f"Memory {n} of the cardinality run {RUN}."} for n in range(1000)]
    ids = []
    for start in range(0, 1000, 100):
        status, _, body = call("POST", "/memories", {"messages": messages[start:start + 100], "user_id": user, "infer": False})
        assert status == 200, (status, body)
        ids += [result["id"] for result in json.loads(body)["results"]]
    assert len(set(ids)) == 1000, len(set(ids))
    before, _ = scrape()
    for memory_id in ids:
        status, _, body = call("GET", f"/memories/{memory_id}")
        assert status == 200, (status, body)
    after, text = scrape()
    assert not any(memory_id in text for memory_id in ids), "a memory id became a label value"
    assert not any(user in text for _ in [0]), "a user id became a label value"
    new_series = set(after) - set(before)
    # The GET series existed already (the previous test); at most the first scrape's series are new.
    assert len(new_series) <= 20, sorted(new_series)[:30]
    moved = delta(requests_by_route(after), requests_by_route(before))
    assert moved == {("GET", "/memories/{memory_id}", "200"): 1000, ("GET", "/metrics", "200"): 1}, moved
    assert len(after) < 3000, len(after)


def test_the_grafana_dashboard_reads_series_the_server_exports():
    dashboard = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "grafana", "mem0-rs.json")
    with open(dashboard) as file:
        panels = json.load(file)["panels"]
    used = {name for panel in panels for target in panel["targets"] for name in re.findall(r"mem0_[a-z_]+", target["expr"])}
    samples, _ = scrape()
    exported = {name for name, _ in samples}
    # Families that have no series until something happens (a 429, a retried provider call).
    quiet = {"mem0_rate_limit_rejections_total", "mem0_provider_retries_total"}
    assert used - quiet <= exported, sorted(used - quiet - exported)
    assert len(used) >= 12, used


def main():
    tests = [value for name, value in sorted(globals().items()) if name.startswith("test_")]
    # In the order written: the bounded-series test reads series the counting test created.
    tests.sort(key=lambda test: test.__code__.co_firstlineno)
    failed = 0
    for test in tests:
        try:
            test()
            print(f"ok   {test.__name__}")
        except Exception:  # noqa: BLE001 (report every failure)
            failed += 1
            print(f"FAIL {test.__name__}")
            traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
