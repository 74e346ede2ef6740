"""A stand-in for an OpenTelemetry Collector: takes OTLP/HTTP JSON exports at POST /v1/traces
and hands every span it got back at GET /spans (each with its resource's service.name), for
tests/traces/test_traces.py. Usage: otlp_receiver.py PORT_FILE."""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPANS = []
LOCK = threading.Lock()


def value(attribute):
    """The plain value of an OTLP JSON AnyValue."""
    (kind, raw), = attribute["value"].items()
    return int(raw) if kind == "intValue" else raw


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        received = []
        for resource in body.get("resourceSpans", []):
            service = {a["key"]: value(a) for a in resource.get("resource", {}).get("attributes", [])}.get("service.name")
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    span["attributes"] = {a["key"]: value(a) for a in span.get("attributes", [])}
                    span["service"] = service
                    received.append(span)
        with LOCK:
            SPANS.extend(received)
        self.reply(200 if self.path == "/v1/traces" else 404, {})

    def do_GET(self):  # noqa: N802
        with LOCK:
            self.reply(200, SPANS)

    def reply(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as port_file:
    port_file.write(str(server.server_address[1]))
server.serve_forever()
