"""OpenTelemetry traces of a running server (traces.enabled, exporting to
tests/traces/otlp_receiver.py at MEM0_TEST_OTLP): an inferred add that carries a W3C
`traceparent` is one span tree in the caller's trace, a request span named after its route with
the request id, and under it the LLM call, the provider's HTTP call, the embedding and the store
write; a request without `traceparent` starts a trace of its own. Run by scripts/clients.sh,
with the fake OpenAI-compatible LLM of tests/sdk/fake_openai.py behind the server. Standard
library only."""

import json
import os
import secrets
import sys
import time
import traceback
import urllib.request

URL = os.environ["MEM0_TEST_URL"]
ADMIN_KEY = os.environ["MEM0_TEST_ADMIN_KEY"]
OTLP = os.environ["MEM0_TEST_OTLP"]
RUN = secrets.token_hex(4)
SERVER, CLIENT = 2, 3  # OTLP span kinds


def call(method, path, body=None, headers=None):
    request = urllib.request.Request(
        f"{URL}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"x-api-key": ADMIN_KEY, "content-type": "application/json", **(headers or {})},
        method=method,
    )
    with urllib.request.urlopen(request) as response:
        return response.status, json.load(response)


def spans_where(predicate, settle=lambda spans: True, timeout=30.0):
    """The received spans matching `predicate`, once `settle` holds for them (or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{OTLP}/spans") as response:
            spans = [span for span in json.load(response) if predicate(span)]
        if settle(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def names(spans):
    return sorted(span["name"] for span in spans)


def test_an_add_is_one_span_tree_in_the_callers_trace():
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    request_id = f"traces-{RUN}"
    status, body = call(
        "POST",
        "/memories",
        {"messages": [{"role": "user", "content": "I had pizza for lunch"}], "user_id": f"traces-{RUN}"},
        {"traceparent": f"00-{trace_id}-{parent_id}-01", "x-request-id": request_id},
    )
    assert status == 200 and body["results"], body
    wanted = {"POST /memories", "llm extraction", "openai llm", "embed", "store apply"}
    spans = spans_where(lambda span: span["traceId"] == trace_id, lambda spans: wanted <= set(names(spans)))
    assert wanted <= set(names(spans)), names(spans)
    by_id = {span["spanId"]: span for span in spans}
    (root,) = [span for span in spans if span["name"] == "POST /memories"]
    # The request span continues the caller's span and carries the request's facts.
    assert root["parentSpanId"] == parent_id, root
    assert root["kind"] == SERVER, root
    assert root["attributes"]["request_id"] == request_id, root["attributes"]
    assert root["attributes"]["route"] == "/memories", root["attributes"]
    assert int(root["attributes"]["status"]) == 200, root["attributes"]
    assert root["service"] == "mem0-rs", root["service"]

    def ancestors(span):
        chain = []
        while span["parentSpanId"] in by_id:
            span = by_id[span["parentSpanId"]]
            chain.append(span["name"])
        return chain

    # Every other span of the trace hangs under the request span.
    for span in spans:
        if span is not root:
            assert ancestors(span)[-1:] == ["POST /memories"], (span["name"], ancestors(span))
    (provider,) = [span for span in spans if span["name"] == "openai llm"]
    assert ancestors(provider)[0] == "llm extraction", ancestors(provider)
    assert provider["kind"] == CLIENT and provider["attributes"]["service"] == "llm", provider
    (llm,) = [span for span in spans if span["name"] == "llm extraction"]
    assert llm["attributes"]["purpose"] == "extraction", llm["attributes"]
    applies = [span for span in spans if span["name"] == "store apply"]
    assert all(span["attributes"]["operation"] == "apply" for span in applies), applies
    embeds = [span for span in spans if span["name"] == "embed"]
    assert all(int(span["attributes"]["texts"]) >= 1 for span in embeds), embeds


def test_a_request_without_traceparent_starts_its_own_trace():
    request_id = f"traces-search-{RUN}"
    status, _ = call("POST", "/search", {"query": "lunch", "user_id": f"traces-{RUN}"}, {"x-request-id": request_id})
    assert status == 200
    (root,) = spans_where(
        lambda span: span["attributes"].get("request_id") == request_id, lambda spans: len(spans) == 1
    )
    assert root["name"] == "POST /search" and not root.get("parentSpanId"), root
    children = spans_where(lambda span: span["traceId"] == root["traceId"] and span["spanId"] != root["spanId"],
                           lambda spans: {"embed", "store search"} <= set(names(spans)))
    assert {"embed", "store search", "store keyword_candidates"} <= set(names(children)), names(children)


def main():
    tests = [value for name, value in globals().items() if name.startswith("test_")]
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
