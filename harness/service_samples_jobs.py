"""Sample (b) of service_samples.py: an API and a background worker talking through Redis."""

from service_samples_common import SEND_JSON

# ---------------------------------------------------------------------------------------------
# (b) An API and a background worker talking through Redis; the API writes the wrong format.

JOBS_PROTOCOL = '''
"""The job queue between the API and the worker.

A job message is JSON: {"id": str, "text": str, "tags": [str, ...]}, pushed on the list
`jobs:queue`. The worker stores its result as JSON under `jobs:result:<id>`.
"""

import os

import redis

QUEUE = "jobs:queue"


def connect():
    return redis.Redis(host=os.environ.get("JOBS_REDIS_HOST", "redis"), port=6379, socket_timeout=30)


def result_key(job_id):
    return f"jobs:result:{job_id}"
'''

JOBS_API_BUGGY = '''
"""HTTP API: POST /jobs queues a job, GET /jobs/<id> reads its result."""

import json
import re
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import protocol

STORE = protocol.connect()


def job_message(job_id, text, tags):
    return json.dumps({"id": job_id, "text": text, "tags": ",".join(tags)})


class Handler(BaseHTTPRequestHandler):''' + SEND_JSON + '''
    def do_GET(self):
        if self.path == "/health":
            return self.send_json(200, {"ok": bool(STORE.ping())})
        match = re.fullmatch(r"/jobs/([0-9a-f]{32})", self.path)
        if not match:
            return self.send_json(404, {"error": "not found"})
        result = STORE.get(protocol.result_key(match.group(1)))
        if result is None:
            known = STORE.sismember("jobs:ids", match.group(1))
            return self.send_json(200 if known else 404, {"status": "queued"} if known else {"error": "no such job"})
        self.send_json(200, {"status": "done", "result": json.loads(result)})

    def do_POST(self):
        if self.path != "/jobs":
            return self.send_json(404, {"error": "not found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        job_id = uuid.uuid4().hex
        STORE.sadd("jobs:ids", job_id)
        STORE.rpush(protocol.QUEUE, job_message(job_id, body.get("text", ""), body.get("tags", [])))
        self.send_json(202, {"id": job_id})

    def log_message(self, fmt, *args):
        print("api:", fmt % args, flush=True)


if __name__ == "__main__":
    print("api: listening on 8000", flush=True)
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

JOBS_API_FIXED = JOBS_API_BUGGY.replace('"tags": ",".join(tags)', '"tags": list(tags)')

JOBS_WORKER = '''
"""The background worker: counts words and normalizes tags of each queued job."""

import json

from . import protocol


def process(message):
    return {
        "words": len(message["text"].split()),
        "tags": sorted({tag.strip().lower() for tag in message["tags"] if tag.strip()}),
    }


def main():
    store = protocol.connect()
    print("worker: waiting for jobs", flush=True)
    while True:
        popped = store.blpop(protocol.QUEUE, timeout=5)
        if popped is None:
            continue
        message = json.loads(popped[1])
        store.set(protocol.result_key(message["id"]), json.dumps(process(message)))
        print(f"worker: done {message['id']}", flush=True)


if __name__ == "__main__":
    main()
'''

JOBS_TESTS = '''
import json
import os
import time
import urllib.error
import urllib.request

API = os.environ.get("JOBS_API", "http://api:8000")


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def result_of(job):
    """Waits for the worker to finish `job` (submitted through the API)."""
    status, created = call("POST", "/jobs", job)
    assert status == 202
    for _ in range(100):
        status, body = call("GET", f"/jobs/{created['id']}")
        if body.get("status") == "done":
            return body["result"]
        time.sleep(0.1)
    raise AssertionError("the worker never finished the job")


def test_health():
    assert call("GET", "/health") == (200, {"ok": True})


def test_job_is_processed_and_words_counted():
    assert result_of({"text": "the quick brown fox", "tags": []})["words"] == 4


def test_unknown_job_is_404():
    assert call("GET", "/jobs/" + "0" * 32)[0] == 404
'''

JOBS_TESTS_NEW = '''

def test_tags_reach_the_worker_intact():
    result = result_of({"text": "refund please", "tags": ["Billing", "urgent", "billing"]})
    assert result["tags"] == ["billing", "urgent"]
'''

REDIS_COMMAND = ["redis-server", "--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no",
                 "--save", "", "--appendonly", "no"]

JOBS = {
    "dir": "jobs-redis-worker",
    "repo": "acme/jobs",
    "instance_id": "acme__jobs-31",
    "created_at": "2024-10-07T14:05:00Z",
    "version": "2.1",
    "problem_statement": """Job tags come out of the worker as single letters

Submitting a job with tags through the API:

```
POST /jobs {"text": "refund please", "tags": ["Billing", "urgent"]}
```

gives, once the worker is done, `"tags": [",", "b", "e", "g", "i", "l", "n", "r", "t", "u"]`
instead of `["billing", "urgent"]`. Word counts are fine.
""",
    "hints_text": "protocol.py documents the job message format.",
    "base": {
        "pyproject.toml": '[project]\nname = "jobs"\nversion = "2.1.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        "README.md": "# jobs\n\nAn HTTP API queues text jobs in Redis; a worker processes them.\n",
        "jobs/__init__.py": "",
        "jobs/protocol.py": JOBS_PROTOCOL,
        "jobs/api.py": JOBS_API_BUGGY,
        "jobs/worker.py": JOBS_WORKER,
        "tests/test_jobs.py": JOBS_TESTS,
    },
    "fix": {"jobs/api.py": JOBS_API_FIXED},
    "tests": {"tests/test_jobs.py": JOBS_TESTS + JOBS_TESTS_NEW},
    "FAIL_TO_PASS": ["tests/test_jobs.py::test_tags_reach_the_worker_intact"],
    "PASS_TO_PASS": [
        "tests/test_jobs.py::test_health",
        "tests/test_jobs.py::test_job_is_processed_and_words_counted",
        "tests/test_jobs.py::test_unknown_job_is_404",
        "service:worker::no-tracebacks",
    ],
    "services": [
        {
            "name": "redis",
            "build": {"apt": ["redis-server"]},
            "command": REDIS_COMMAND,
            "ports": [6379],
            "ready": {"cmd": ["redis-cli", "ping"], "timeout_s": 30},
        },
        {
            "name": "api",
            "build": {"apt": ["python3-redis"]},
            "command": ["python3", "-m", "jobs.api"],
            "repo": True,
            "ports": [8000],
            "depends_on": ["redis"],
            "ready": {"http": "/health"},
        },
        {
            "name": "worker",
            "build": {"apt": ["python3-redis"]},
            "command": ["python3", "-m", "jobs.worker"],
            "repo": True,
            "depends_on": ["redis"],
        },
    ],
    "service_checks": [{"service": "worker", "name": "no-tracebacks", "log_excludes": "Traceback"}],
}
