#!/usr/bin/env python3
"""Deployment drill: a running mem0-server treated the way real clients treat it.

Starts the server binary (release build) on a fresh SQLite or Postgres store and, over HTTP only:
  long     adds with 3,000-character assistant turns (verbatim), latency per add
  heavy    5,000 memories for one user from 8 concurrent writers, then hybrid searches over
           them and a full listing that must return every memory exactly once
  cut      clients that send a request and hang up (half-way through the body, right after it,
           or while the add runs); every request left all of its memories or none, each with
           its ADD history, and the server answers afterwards
  kill     kill -9 while 8 writers add; after a restart every acknowledged memory is there and
           every memory has its ADD history
  queue    300 queued adds (async_mode) over 5 users, kill -9 while the workers run them, twice;
           after the restarts every job succeeded, each add's memories are stored exactly once,
           and each user's adds ran in the order they were queued
  import   (not in the default set) 3,000 memories exported, then imported under another user
           twice: once killed with -9 a second in and sent again after the restart, once cut off
           by a client hanging up half way through the body and sent again; each time every
           memory is there once with its one history entry
  search   (not in the default set) HTTP load: one user with DRILL_SEARCH_MEMORIES memories
           (default 1,000), then dense and hybrid searches from 1, 4 and 16 clients on kept-alive
           connections: req/s, p50/p99, and the CPU each search cost the server (and Postgres)
  replicas (not in the default set; store `postgres` only) a second server on the same
           database; hybrid searches and verbatim adds from 16 clients against one replica,
           then split over both: req/s, p50/p99; every add is listed through the other replica

Usage: scripts/drill.py BINARY MODEL_DIR [sqlite|pgvector|postgres ...]
       (pgvector and postgres need DATABASE_URL; postgres = pgvector with the history there too)
       DRILL_PHASES=cut,kill scripts/drill.py ...                   (a subset of the phases)
       DRILL_PHASES=search scripts/drill.py ...                     (the search load alone;
       DRILL_SEARCH_MEMORIES, DRILL_SEARCH_REQUESTS per cell, default 200)
Rate limiting is switched off for the drill (one local principal sends thousands of writes).
Standard library only. Prints figures; exits non-zero when a check fails.
"""

import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

WORDS = (
    "garden bees honey river morning coffee project deadline budget travel train flight hotel "
    "Lisbon Berlin Kyoto doctor appointment allergy peanuts running marathon knee physio guitar "
    "lessons daughter school teacher recipe lasagna oven weekend hiking boots rain jacket "
    "database migration postgres latency index query release review colleague manager promotion "
    "salary savings mortgage apartment balcony tomatoes basil neighbour dog walk vet vaccine "
    "birthday party cake candles sister wedding speech suit tailor invoice client contract"
).split()
NAMES = ["Alice", "Bob", "Emma", "Dr. Patel", "Marco", "Yuki", "Priya", "Lars"]


def sentence(rng):
    words = rng.sample(WORDS, rng.randint(8, 16))
    if rng.random() < 0.4:
        words.insert(rng.randrange(len(words)), rng.choice(NAMES))
    return " ".join(words).capitalize() + "."


def text_of(rng, chars):
    out = []
    while sum(len(part) + 1 for part in out) < chars:
        out.append(sentence(rng))
    return " ".join(out)[:chars]


class Server:
    def __init__(self, binary, model_dir, store, workdir):
        self.binary, self.model_dir, self.store, self.workdir = binary, model_dir, store, workdir
        self.port = free_port()
        self.process = None

    def env(self):
        env = dict(os.environ)
        for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
            env.pop(key, None)
        env.update({
            "MEM0__SERVER__BIND": f"127.0.0.1:{self.port}",
            "MEM0__MEMORY__EMBEDDER__LOCAL__MODEL_DIR": self.model_dir,
            "MEM0__MEMORY__VECTOR_STORE__PROVIDER": "sqlite" if self.store == "sqlite" else "pgvector",
            "MEM0__MEMORY__HISTORY__PROVIDER": "postgres" if self.store == "postgres" else "sqlite",
            "MEM0__MEMORY__VECTOR_STORE__SQLITE__PATH": os.path.join(self.workdir, "memories.db"),
            "MEM0__MEMORY__HISTORY__PATH": os.path.join(self.workdir, "history.db"),
            "MEM0__CONFIGURE__STATE_PATH": os.path.join(self.workdir, "runtime-config.json"),
            "RUST_LOG": "warn",
            # A load drill: one local principal sends thousands of writes; the per-minute budget
            # (tested on its own in the API tests) would turn the later phases into 429s.
            "MEM0__RATE_LIMIT__ENABLED": "false",
            # Replicas share the queue on Postgres: a killed server's runs wait for their leases.
            "MEM0__JOBS__LEASE_SECS": "5",
        })
        return env

    def start(self):
        log = open(os.path.join(self.workdir, "server.log"), "ab")
        self.process = subprocess.Popen([self.binary, "serve"], env=self.env(), stdout=log, stderr=log)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited with {self.process.returncode}; see {self.workdir}/server.log")
            try:
                if request(self.port, "GET", "/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"server did not get ready; see {self.workdir}/server.log")

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(port, method, path, body=None, timeout=120):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None)
    finally:
        connection.close()


def add(port, user, messages):
    return request(port, "POST", "/memories", {"messages": messages, "user_id": user, "infer": False})


def listing(port, user):
    items, cursor = [], None
    while True:
        path = f"/memories?user_id={user}&page_size=1000" + (f"&cursor={cursor}" if cursor else "")
        status, body = request(port, "GET", path)
        check(status == 200, f"list {user}: {status} {body}")
        items += body["results"]
        cursor = body["next"]
        if not cursor:
            return items


def every_memory_has_its_history(port, user):
    items = listing(port, user)
    for item in items:
        status, history = request(port, "GET", f"/memories/{item['id']}/history")
        check(status == 200 and any(entry["event"] == "ADD" for entry in history),
              f"memory {item['id']} of {user} has no ADD history: {status} {history}")
    return items


FAILURES = []
PHASES = os.environ.get("DRILL_PHASES", "long,heavy,cut,kill,queue").split(",")


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("  FAIL:", message)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def drill_long(port, rng):
    latencies = []
    for turn in range(40):
        messages = [
            {"role": "user", "content": text_of(rng, 300)},
            {"role": "assistant", "content": text_of(rng, 3000)},
            {"role": "user", "content": text_of(rng, 200)},
            {"role": "assistant", "content": text_of(rng, 2500)},
        ]
        started = time.perf_counter()
        status, body = add(port, "long", messages)
        latencies.append(time.perf_counter() - started)
        check(status == 200 and len(body["results"]) == 4, f"long add {turn}: {status} {body}")
    status, body = request(port, "POST", "/search", {"query": "when is the physio appointment for the knee?", "user_id": "long"})
    check(status == 200 and body["results"], f"search over long turns: {status}")
    print(f"  long: 40 adds of 4 messages (3,000 + 2,500 + 300 + 200 chars): "
          f"p50 {pct(latencies, 0.5):.0f} ms, p95 {pct(latencies, 0.95):.0f} ms per add")


def drill_heavy(port, rng):
    per_request, requests_total, writers = 20, 250, 8
    texts = [[text_of(random.Random(i * 1000 + j), rng.randint(200, 600)) for j in range(per_request)]
             for i in range(requests_total)]
    errors, latencies, lock = [], [], threading.Lock()

    def writer(index):
        for batch in texts[index::writers]:
            started = time.perf_counter()
            status, body = add(port, "heavy", [{"role": "user", "content": text} for text in batch])
            with lock:
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    errors.append((status, body))

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    check(not errors, f"heavy writes failed: {errors[:3]}")
    total = per_request * requests_total
    print(f"  heavy: {total} memories from {writers} concurrent writers in {elapsed:.1f} s "
          f"({total / elapsed:.0f} memories/s; p50 {pct(latencies, 0.5):.0f} ms, p95 {pct(latencies, 0.95):.0f} ms per add of {per_request})")
    items = listing(port, "heavy")
    ids = [item["id"] for item in items]
    check(len(ids) == total and len(set(ids)) == total, f"listing returned {len(ids)} ({len(set(ids))} unique), expected {total}")
    search_latencies = []
    for index in range(50):
        query = " ".join(rng.sample(WORDS, 5)) + "?"
        started = time.perf_counter()
        status, body = request(port, "POST", "/search", {"query": query, "user_id": "heavy", "top_k": 10})
        search_latencies.append(time.perf_counter() - started)
        check(status == 200 and len(body["results"]) > 0, f"search {index}: {status}")
    print(f"  heavy: listing of {len(ids)} in pages of 1000 complete; hybrid search over {total}: "
          f"p50 {pct(search_latencies, 0.5):.0f} ms, p95 {pct(search_latencies, 0.95):.0f} ms")


def hang_up(port, body, send_bytes, linger):
    raw = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(
            f"POST /memories HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(raw)}\r\n\r\n".encode() + raw[:send_bytes])
        time.sleep(linger)


def drill_cut(port, rng):
    """300 clients that hang up: 100 half-way through the body, 100 right after it, 100 after
    0–1.5 s (some while their add runs, some after it finished). Each add holds two messages, so
    all-or-nothing means each request left 0 or 2 memories, never 1."""
    bodies = []
    for index in range(300):
        body = {"messages": [{"role": "user", "content": f"cut {index} " + text_of(rng, 1500)},
                             {"role": "assistant", "content": f"cut {index} reply " + text_of(rng, 3000)}],
                "user_id": "cut", "infer": False}
        bodies.append(body)
        size = len(json.dumps(body))
        kind = index % 3
        if kind == 0:
            hang_up(port, body, size // 2, random.random() * 0.05)
        elif kind == 1:
            hang_up(port, body, size, 0)
        else:
            hang_up(port, body, size, random.random() * 1.5)
    time.sleep(5)  # let writes that were not cancelled finish on their own tasks
    status, _ = request(port, "GET", "/health")
    check(status == 200, "server answers after the hang-ups")
    items = every_memory_has_its_history(port, "cut")
    per_request = {}
    for item in items:
        marker = item["memory"].split(" ", 2)[:2]
        per_request[marker[1]] = per_request.get(marker[1], 0) + 1
    halves = [index for index, count in per_request.items() if count != 2]
    check(not halves, f"requests that left some but not all of their memories: {halves[:5]}")
    whole = [int(index) for index in per_request]
    check(not any(index % 3 == 0 for index in whole), "a request cut half-way through its body was written")
    status, body = add(port, "cut", [{"role": "user", "content": "written after the hang-ups"}])
    check(status == 200, f"a write after the hang-ups: {status} {body}")
    by_kind = [sum(1 for index in whole if index % 3 == kind) for kind in range(3)]
    print(f"  cut: 300 clients hung up; requests written (both memories, with ADD history): "
          f"{by_kind[0]}/100 cut mid-body, {by_kind[1]}/100 gone right after the body, "
          f"{by_kind[2]}/100 gone after 0-1.5 s; none half-written; later requests fine")


def drill_kill(server, rng):
    acked, refused, lock, stop = [], [], threading.Lock(), threading.Event()

    def writer(index):
        count = 0
        while not stop.is_set():
            text = f"crash drill writer {index} memory {count}: " + text_of(rng, 400)
            count += 1
            try:
                status, body = add(server.port, "crash", [{"role": "user", "content": text}])
            except OSError:
                return
            if status == 200:
                with lock:
                    acked.append(body["results"][0]["id"])
            else:
                with lock:
                    refused.append(status)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(4)
    server.kill9()
    stop.set()
    for thread in threads:
        thread.join()
    server.start()
    items = every_memory_has_its_history(server.port, "crash")
    present = {item["id"] for item in items}
    lost = [memory for memory in acked if memory not in present]
    check(not refused, f"writes refused before the kill: {refused[:5]}")
    check(acked, "no write was acknowledged before the kill: the drill proved nothing")
    check(not lost, f"{len(lost)} acknowledged memories lost by kill -9")
    print(f"  kill: kill -9 during 8 concurrent writers; {len(acked)} acknowledged, {len(items)} present "
          f"after restart, none lost, every one with its ADD history")


def drill_queue(server, rng):
    users = [f"queue{index}" for index in range(5)]
    jobs = []  # (user, step, job id)
    started = time.time()
    for step in range(60):
        for user in users:
            body = {"messages": [{"role": "user", "content": f"step {step:03d} of {user}: " + text_of(rng, 300)}],
                    "user_id": user, "infer": False, "async_mode": True}
            status, reply = request(server.port, "POST", "/memories", body)
            check(status == 202, f"queue: add answered {status} {reply}")
            jobs.append((user, step, reply["job_id"]))
    queued_in = time.time() - started
    for _ in range(2):
        time.sleep(1.0)
        server.kill9()
        server.start()
    started = time.time()
    pending = {job_id for _, _, job_id in jobs}
    results = {}
    while pending and time.time() - started < 600:
        for job_id in list(pending):
            status, job = request(server.port, "GET", f"/jobs/{job_id}")
            check(status == 200, f"queue: job {job_id}: {status} {job}")
            if job["status"] in ("succeeded", "failed"):
                results[job_id] = job
                pending.discard(job_id)
        time.sleep(0.2)
    check(not pending, f"queue: {len(pending)} jobs unfinished after 10 minutes")
    failed = [job for job in results.values() if job["status"] != "succeeded"]
    check(not failed, f"queue: {len(failed)} jobs failed: {failed[:2]}")
    retried = sum(1 for job in results.values() if job["attempts"] > 1)
    for user in users:
        items = every_memory_has_its_history(server.port, user)
        steps = [int(item["memory"].split()[1]) for item in sorted(items, key=lambda item: (item["created_at"], item["id"]))]
        check(steps == list(range(60)), f"queue: {user} has steps {steps[:10]}… (each once, in order, expected)")
        for user_of, step, job_id in jobs:
            if user_of == user and job_id in results:
                ids = [item["id"] for item in results[job_id]["result"]["results"]]
                check(len(ids) == 1 and ids[0] in {item["id"] for item in items},
                      f"queue: job {job_id} answers {ids}, not what is stored")
    print(f"  queue: 300 adds queued in {queued_in:.1f} s; kill -9 twice while they ran; all succeeded "
          f"({retried} after a cut-off run), each stored once and in order per user")


def cpu_seconds(pids):
    """User + system CPU of the processes `pids` so far (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / ticks


def postgres_pids():
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == "postgres":
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def load(ports, clients, total, path, make_body):
    """`total` requests from `clients` kept-alive clients, client i on ports[i % len(ports)]."""
    latencies, errors, lock = [], [], threading.Lock()
    counter = iter(range(total))

    def client(port):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for index in counter:
                body = json.dumps(make_body(index)).encode()
                began = time.perf_counter()
                connection.request("POST", path, body=body, headers={"content-type": "application/json"})
                response = connection.getresponse()
                response.read()
                with lock:
                    latencies.append(time.perf_counter() - began)
                    if response.status != 200:
                        errors.append(response.status)
        finally:
            connection.close()

    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(ports[i % len(ports)],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - began), latencies, errors


NDJSON = {"content-type": "application/x-ndjson"}


def raw(port, method, path, body=b"", headers=None, timeout=600):
    """Status and body bytes of one request (for the JSON-lines routes)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def renamed(export, user):
    """The export's lines with fresh ids and `user` as owner (so they import beside the originals)."""
    lines = []
    for line in export.splitlines():
        item = json.loads(line)
        if item.get("type") == "memory":
            memory = item["memory"] if "memory" in item and isinstance(item["memory"], dict) else item
            new_id = str(uuid.uuid4())
            for entry in memory.get("history", []):
                entry["id"], entry["memory_id"] = str(uuid.uuid4()), new_id
            memory["id"], memory["user_id"] = new_id, user
        lines.append(json.dumps(item))
    return ("\n".join(lines) + "\n").encode()


def imported_once(port, user, expected):
    items = listing(port, user)
    ids = {item["id"] for item in items}
    check(len(items) == expected and len(ids) == expected, f"{user}: {len(items)} listed, {len(ids)} distinct, want {expected}")
    singles = 0
    for item in items:
        status, history = request(port, "GET", f"/memories/{item['id']}/history")
        singles += status == 200 and len(history) == 1
    check(singles == expected, f"{user}: {expected - singles} memories without exactly their one ADD history entry")
    return len(items)


def drill_import(server, rng):
    total = 3_000
    for start in range(0, total, 100):
        batch = [{"role": "user", "content": f"import drill {start + n}: " + text_of(rng, 300)} for n in range(100)]
        status, body = add(server.port, "transfer", batch)
        check(status == 200, f"import drill: add failed: {status} {body}")
    status, export = raw(server.port, "GET", "/export?user_id=transfer&embeddings=true")
    check(status == 200, f"export: {status}")

    # kill -9 while the import runs, restart, send the same file again.
    body = renamed(export, "transfer-killed")
    outcome = {}
    sender = threading.Thread(target=lambda: outcome.update(result=_try(lambda: raw(server.port, "POST", "/import", body, NDJSON))))
    sender.start()
    time.sleep(1.0)
    server.kill9()
    sender.join()
    server.start()
    send_again(server.port, body, "transfer-killed", total, f"kill -9 one second into an import of {total}")

    # A client that hangs up half way through the body, then sends the whole file.
    body = renamed(export, "transfer-cut")
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        head = (f"POST /import HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-ndjson\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        connection.sendall(head + body[: len(body) // 2])
        time.sleep(1.0)
    time.sleep(1.0)
    send_again(server.port, body, "transfer-cut", total, "a client hung up half way through the body")


def send_again(port, body, user, total, what):
    """After an interrupted import of `body`: the whole file again completes it, each memory once."""
    before = len(listing(port, user))
    status, report = raw(port, "POST", "/import", body, NDJSON)
    report = json.loads(report)
    check(status == 200 and report["failed"] == 0 and report["imported"] + report["existing"] == total,
          f"re-import after {what}: {status} {report}")
    imported_once(port, user, total)
    print(f"  import: {what}: {before} stored; sending the file again imported {report['imported']}, found "
          f"{report['existing']}; {total} memories once, each with its one history entry")


def _try(call):
    try:
        return call()
    except OSError as error:
        return error


def drill_search(server, rng):
    memories = int(os.environ.get("DRILL_SEARCH_MEMORIES", "1000"))
    requests_per_cell = int(os.environ.get("DRILL_SEARCH_REQUESTS", "200"))
    started = time.perf_counter()
    for first in range(0, memories, 50):
        batch = [{"role": "user", "content": sentence(rng)} for _ in range(min(50, memories - first))]
        status, body = add(server.port, "search", batch)
        check(status == 200, f"search load: add failed: {status} {body}")
    print(f"  search: {memories} memories for one user loaded in {time.perf_counter() - started:.1f} s")
    queries = [" ".join(rng.sample(WORDS, 4)) + "?" for _ in range(64)]
    for mode in ("dense", "hybrid"):
        for clients in (1, 4, 16):
            pids = [server.process.pid] + (postgres_pids() if server.store != "sqlite" else [])
            cpu_before = cpu_seconds(pids)
            rate, latencies, errors = load([server.port], clients, requests_per_cell, "/search", lambda index: {
                "query": queries[index % len(queries)], "user_id": "search", "mode": mode, "top_k": 10})
            cpu = cpu_seconds(pids) - cpu_before
            check(not errors, f"search load {mode} c={clients}: {errors[:3]}")
            print(f"  search: {mode:6} c={clients:<2} {rate:7.1f} req/s  "
                  f"p50 {pct(latencies, 0.5):6.1f} ms  p99 {pct(latencies, 0.99):6.1f} ms  "
                  f"cpu/search {cpu / max(1, len(latencies)) * 1000:5.2f} ms")


def drill_replicas(server, rng):
    check(server.store == "postgres", "the replicas phase needs the postgres store")
    second = Server(server.binary, server.model_dir, server.store, tempfile.mkdtemp(prefix="mem0-drill-replica-"))
    second.start()
    try:
        for first in range(0, 1000, 50):
            batch = [{"role": "user", "content": sentence(rng)} for _ in range(50)]
            status, body = add(server.port, "replicas", batch)
            check(status == 200, f"replicas: seeding failed: {status} {body}")
        queries = [" ".join(rng.sample(WORDS, 4)) + "?" for _ in range(64)]
        requests = int(os.environ.get("DRILL_SEARCH_REQUESTS", "400"))
        added = 0
        for label, ports in (("one replica ", [server.port]), ("two replicas", [server.port, second.port])):
            rate, latencies, errors = load(ports, 16, requests, "/search", lambda index: {
                "query": queries[index % len(queries)], "user_id": "replicas", "top_k": 10})
            check(not errors, f"replicas: search errors {errors[:3]}")
            print(f"  replicas: {label} hybrid search c=16 {rate:7.1f} req/s  p50 {pct(latencies, 0.5):6.1f} ms  "
                  f"p99 {pct(latencies, 0.99):6.1f} ms")
            rate, latencies, errors = load(ports, 16, requests, "/memories", lambda index: {
                "messages": [{"role": "user", "content": sentence(random.Random(index))}],
                "user_id": "replica-writes", "infer": False})
            check(not errors, f"replicas: add errors {errors[:3]}")
            added += len(latencies)
            print(f"  replicas: {label} add (infer=false) c=16 {rate:7.1f} req/s  p50 {pct(latencies, 0.5):6.1f} ms  "
                  f"p99 {pct(latencies, 0.99):6.1f} ms")
        listed = listing(second.port, "replica-writes")
        check(len(listed) == added, f"replicas: {added} adds acknowledged, {len(listed)} listed through the other")
        every_memory_has_its_history(second.port, "replica-writes")
    finally:
        second.stop()


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary, model_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    for store in sys.argv[3:] or ["sqlite"]:
        with tempfile.TemporaryDirectory(prefix=f"mem0-drill-{store}-") as workdir:
            print(f"== {store}")
            server = Server(binary, model_dir, store, workdir)
            server.start()
            try:
                rng = random.Random(7)
                if "long" in PHASES:
                    drill_long(server.port, rng)
                if "heavy" in PHASES:
                    drill_heavy(server.port, rng)
                if "cut" in PHASES:
                    drill_cut(server.port, rng)
                if "kill" in PHASES:
                    drill_kill(server, rng)
                if "queue" in PHASES:
                    drill_queue(server, rng)
                if "import" in PHASES:
                    drill_import(server, rng)
                if "search" in PHASES:
                    drill_search(server, rng)
                if "replicas" in PHASES:
                    drill_replicas(server, rng)
            finally:
                server.stop()
    if FAILURES:
        raise SystemExit(f"{len(FAILURES)} checks failed")
    print("all checks passed")


if __name__ == "__main__":
    main()
