"""Sample repair tasks whose tests talk to services (PostgreSQL, Redis, the project's own
server), loaded by make-samples.py. Each task's `services` start on a private network for
every test run; the tests reach them by name. See issues/README.md for the format."""

from service_samples_common import SEND_JSON
from service_samples_jobs import JOBS

# ---------------------------------------------------------------------------------------------
# (a) An HTTP API backed by PostgreSQL; the bug is in a SQL query.

# Debian bookworm's PostgreSQL, called directly (its wrappers look for a system cluster).
PG_BIN = "/usr/lib/postgresql/15/bin/"

POSTGRES_COMMAND = (
    f"export PATH={PG_BIN}:$PATH"
    " && initdb -D /var/lib/shop-db/data -U app --auth=trust -E UTF8 --locale=C >/dev/null"
    " && echo 'host all all 0.0.0.0/0 trust' >> /var/lib/shop-db/data/pg_hba.conf"
    " && exec postgres -D /var/lib/shop-db/data -k /tmp -c listen_addresses='*' -c fsync=off"
)

SHOP_SERVER = '''
"""The shop's HTTP API: customers and their order summaries, read from PostgreSQL."""

import json
import os
import re
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2

from . import queries

PORT = int(os.environ.get("SHOP_PORT", "8000"))


def connect():
    return psycopg2.connect(
        host=os.environ.get("SHOP_DB_HOST", "db"), user="app", dbname="postgres", connect_timeout=3
    )


def apply_schema():
    """Creates and seeds the tables (the database is fresh on every start)."""
    for attempt in range(50):
        try:
            conn = connect()
            break
        except psycopg2.OperationalError:
            time.sleep(0.2)
    else:
        raise SystemExit("the database never answered")
    with conn, conn.cursor() as cur, open("schema.sql") as schema:
        cur.execute(schema.read())
    conn.close()


class Handler(BaseHTTPRequestHandler):''' + SEND_JSON + '''
    def do_GET(self):
        if self.path == "/health":
            return self.send_json(200, {"ok": True})
        match = re.fullmatch(r"/customers/(\\d+)/summary", self.path)
        if match:
            conn = connect()
            try:
                summary = queries.customer_summary(conn, int(match.group(1)))
            finally:
                conn.close()
            if summary is None:
                return self.send_json(404, {"error": "no such customer"})
            return self.send_json(200, summary)
        self.send_json(404, {"error": "not found"})

    def log_message(self, fmt, *args):
        print("api:", fmt % args, flush=True)


if __name__ == "__main__":
    apply_schema()
    print(f"api: listening on {PORT}", flush=True)
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
'''

SHOP_QUERIES_BUGGY = '''
"""SQL behind the API."""

SUMMARY = """
    SELECT c.name, COUNT(*) AS orders, COALESCE(SUM(o.quantity * o.unit_cents), 0) AS total_cents
    FROM customers c LEFT JOIN orders o ON o.customer_id = c.id
    WHERE c.id = %s
    GROUP BY c.id, c.name
"""


def customer_summary(conn, customer_id):
    """Name, number of orders and total spent (cents) of one customer; None if unknown."""
    with conn.cursor() as cur:
        cur.execute(SUMMARY, (customer_id,))
        row = cur.fetchone()
    if row is None:
        return None
    name, orders, total = row
    return {"name": name, "orders": orders, "total_cents": int(total)}
'''

SHOP_QUERIES_FIXED = SHOP_QUERIES_BUGGY.replace("COUNT(*) AS orders", "COUNT(o.id) AS orders")

SHOP_SCHEMA = """
CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE orders (
    id serial PRIMARY KEY,
    customer_id integer NOT NULL REFERENCES customers (id),
    quantity integer NOT NULL,
    unit_cents integer NOT NULL
);
INSERT INTO customers VALUES (1, 'Ada'), (2, 'Grace'), (3, 'Edsger');
INSERT INTO orders (customer_id, quantity, unit_cents) VALUES (1, 2, 450), (1, 1, 1200), (2, 3, 99);
"""

SHOP_TESTS = '''
import json
import os
import urllib.error
import urllib.request

API = os.environ.get("SHOP_API", "http://api:8000")


def get(path):
    try:
        with urllib.request.urlopen(API + path, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_health():
    assert get("/health") == (200, {"ok": True})


def test_summary_counts_orders_and_total():
    assert get("/customers/1/summary") == (200, {"name": "Ada", "orders": 2, "total_cents": 2100})


def test_unknown_customer_is_404():
    assert get("/customers/99/summary")[0] == 404
'''

SHOP_TESTS_NEW = '''

def test_customer_without_orders_has_none():
    assert get("/customers/3/summary") == (200, {"name": "Edsger", "orders": 0, "total_cents": 0})
'''

SHOP = {
    "dir": "shop-api-postgres",
    "repo": "acme/shop-api",
    "instance_id": "acme__shop-api-12",
    "created_at": "2024-09-02T10:30:00Z",
    "version": "0.4",
    "problem_statement": """Customer summary says 1 order for customers who never ordered

`GET /customers/3/summary` for a customer without any order answers

```json
{"name": "Edsger", "orders": 1, "total_cents": 0}
```

The total is right, but `orders` should be 0. Customers with orders are counted correctly.
""",
    "hints_text": "The summary query joins customers to orders with a LEFT JOIN.",
    "base": {
        "pyproject.toml": '[project]\nname = "shop-api"\nversion = "0.4.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        "README.md": "# shop-api\n\nCustomers and their order summaries over HTTP, stored in PostgreSQL.\n",
        "schema.sql": SHOP_SCHEMA,
        "app/__init__.py": "",
        "app/queries.py": SHOP_QUERIES_BUGGY,
        "app/server.py": SHOP_SERVER,
        "tests/test_api.py": SHOP_TESTS,
    },
    "fix": {"app/queries.py": SHOP_QUERIES_FIXED},
    "tests": {"tests/test_api.py": SHOP_TESTS + SHOP_TESTS_NEW},
    "FAIL_TO_PASS": ["tests/test_api.py::test_customer_without_orders_has_none"],
    "PASS_TO_PASS": [
        "tests/test_api.py::test_health",
        "tests/test_api.py::test_summary_counts_orders_and_total",
        "tests/test_api.py::test_unknown_customer_is_404",
        "service:db::schema-applied",
        "service:api::no-tracebacks",
    ],
    "services": [
        {
            "name": "db",
            "build": {"apt": ["postgresql"]},
            "command": ["sh", "-c", POSTGRES_COMMAND],
            "ports": [5432],
            "data_dirs": ["/var/lib/shop-db"],
            "ready": {"cmd": [PG_BIN + "pg_isready", "-h", "127.0.0.1", "-p", "5432", "-U", "app"], "timeout_s": 90},
        },
        {
            "name": "api",
            "build": {"apt": ["python3-psycopg2"]},
            "command": ["python3", "-m", "app.server"],
            "repo": True,
            "ports": [8000],
            "depends_on": ["db"],
            "ready": {"http": "/health", "timeout_s": 60},
        },
    ],
    "service_checks": [
        {
            "service": "db",
            "name": "schema-applied",
            "cmd": [PG_BIN + "psql", "-h", "127.0.0.1", "-U", "app", "-d", "postgres", "-tAc", "SELECT count(*) FROM customers"],
        },
        {"service": "api", "name": "no-tracebacks", "log_excludes": "Traceback"},
    ],
}

# ---------------------------------------------------------------------------------------------
# (c) A key-value service and its client library in one repository; the fix spans both.

KV_SERVER_BUGGY = '''
"""A tiny key-value store over HTTP: PUT/GET/DELETE /items/<key>, GET /items lists keys."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ITEMS = {}
PREFIX = "/items/"


def key_of(path):
    return path[len(PREFIX):]


class Handler(BaseHTTPRequestHandler):''' + SEND_JSON + '''
    def do_GET(self):
        if self.path == "/health":
            return self.send_json(200, {"ok": True})
        if self.path == "/items":
            return self.send_json(200, sorted(ITEMS))
        if self.path.startswith(PREFIX) and key_of(self.path) in ITEMS:
            return self.send_json(200, {"value": ITEMS[key_of(self.path)]})
        self.send_json(404, {"error": "not found"})

    def do_PUT(self):
        if not self.path.startswith(PREFIX):
            return self.send_json(404, {"error": "not found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        ITEMS[key_of(self.path)] = body["value"]
        self.send_json(200, {"ok": True})

    def do_DELETE(self):
        existed = ITEMS.pop(key_of(self.path), None) is not None
        self.send_json(200 if existed else 404, {"ok": existed})

    def log_message(self, fmt, *args):
        print("kv:", fmt % args, flush=True)


if __name__ == "__main__":
    print("kv: listening on 7070", flush=True)
    ThreadingHTTPServer(("0.0.0.0", 7070), Handler).serve_forever()
'''

KV_SERVER_FIXED = KV_SERVER_BUGGY.replace(
    "import json\n", "import json\nfrom urllib.parse import unquote\n", 1
).replace("    return path[len(PREFIX):]", "    return unquote(path[len(PREFIX):])")

KV_CLIENT_BUGGY = '''
"""Client library for the key-value service."""

import json
import urllib.error
import urllib.request


class Client:
    def __init__(self, base_url):
        self.base_url = base_url.rstrip("/")

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def _item(self, key):
        return "/items/" + key

    def put(self, key, value):
        status, _ = self._call("PUT", self._item(key), {"value": value})
        if status != 200:
            raise RuntimeError(f"put {key!r} failed with {status}")

    def get(self, key, default=None):
        status, body = self._call("GET", self._item(key))
        return body["value"] if status == 200 else default

    def delete(self, key):
        return self._call("DELETE", self._item(key))[0] == 200

    def keys(self):
        return self._call("GET", "/items")[1]
'''

KV_CLIENT_FIXED = KV_CLIENT_BUGGY.replace(
    "import json\n", "import json\nfrom urllib.parse import quote\n", 1
).replace('return "/items/" + key', 'return "/items/" + quote(key, safe="")')

KV_TESTS = '''
import os
import uuid

from kvstore.client import Client

KV = Client(os.environ.get("KV_URL", "http://kv:7070"))


def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_plain_keys_round_trip():
    key = fresh("plain")
    KV.put(key, {"n": 1})
    assert KV.get(key) == {"n": 1}


def test_missing_key_gives_default():
    assert KV.get(fresh("missing"), "none") == "none"


def test_delete():
    key = fresh("gone")
    KV.put(key, 1)
    assert KV.delete(key) and KV.get(key) is None
'''

KV_TESTS_NEW = '''

def test_keys_with_spaces_and_slashes_round_trip():
    key = fresh("a b/c")
    KV.put(key, "x")
    assert KV.get(key) == "x"


def test_server_lists_keys_as_given():
    key = fresh("report 2024/10")
    KV.put(key, 1)
    assert key in KV.keys()
'''

KV = {
    "dir": "kvstore-client-server",
    "repo": "acme/kvstore",
    "instance_id": "acme__kvstore-8",
    "created_at": "2024-11-12T08:45:00Z",
    "version": "0.2",
    "problem_statement": """Keys with spaces or slashes do not work

```python
>>> client.put("report 2024/10", 1)
http.client.InvalidURL: URL can't contain control characters. '/items/report 2024/10' (found at least ' ')
```

Keys are arbitrary strings: `put`, `get` and `delete` must accept any key, and `GET /items`
must list the keys exactly as they were given.
""",
    "hints_text": "",
    "base": {
        "pyproject.toml": '[project]\nname = "kvstore"\nversion = "0.2.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        "README.md": "# kvstore\n\nA tiny key-value service (`python3 -m kvstore.server`) and its client library.\n",
        "kvstore/__init__.py": "",
        "kvstore/server.py": KV_SERVER_BUGGY,
        "kvstore/client.py": KV_CLIENT_BUGGY,
        "tests/test_client.py": KV_TESTS,
    },
    "fix": {"kvstore/server.py": KV_SERVER_FIXED, "kvstore/client.py": KV_CLIENT_FIXED},
    "tests": {"tests/test_client.py": KV_TESTS + KV_TESTS_NEW},
    "FAIL_TO_PASS": [
        "tests/test_client.py::test_keys_with_spaces_and_slashes_round_trip",
        "tests/test_client.py::test_server_lists_keys_as_given",
    ],
    "PASS_TO_PASS": [
        "tests/test_client.py::test_plain_keys_round_trip",
        "tests/test_client.py::test_missing_key_gives_default",
        "tests/test_client.py::test_delete",
    ],
    "services": [
        {
            "name": "kv",
            "build": {},
            "command": ["python3", "-m", "kvstore.server"],
            "repo": True,
            "ports": [7070],
            "ready": {"http": "/health", "timeout_s": 30},
        },
    ],
}

SERVICE_SAMPLES = [SHOP, JOBS, KV]
