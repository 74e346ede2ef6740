"""A stand-in for an OpenAI-compatible chat API (this machine reaches no LLM): answers every
POST /v1/chat/completions with fact-extraction output chosen by words in the request, so the
SDK tests can use Mem0's default `infer=true` adds. Usage: fake_openai.py PORT_FILE."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (word in the conversation, fact the "model" extracts, entities)
FACTS = [
    ("pizza", "User loves pizza", ["pizza"]),
    ("Lisbon", "User lives in Lisbon", ["Lisbon"]),
    ("vegetarian", "User is vegetarian", []),
]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("content-length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        # The conversation is in the last message of the prompt; the system prompt mentions
        # neither word.
        conversation = json.dumps(request.get("messages", [])[-1:])
        facts = [
            {"text": text, "attributed_to": "user", "entities": entities}
            for word, text, entities in FACTS
            if word in conversation
        ]
        body = json.dumps({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": request.get("model", "fake-chat"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps({"facts": facts})},
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }).encode()
        self.send_response(200 if self.path.endswith("/chat/completions") else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as port_file:
    port_file.write(str(server.server_address[1]))
server.serve_forever()
