"""Schemathesis hooks for scripts/schemathesis.sh: how to send an `application/x-ndjson` body
(POST /import), which schemathesis has no serializer for. The document describes the body as a
string (the lines of an export); generated values are sent as UTF-8 text, anything else as one
JSON line."""

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return (json.dumps(value) + "\n").encode("utf-8")
