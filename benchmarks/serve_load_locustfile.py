"""Locust users for `benchmarks/serve_load.py`: closed-loop clients of `POST /search`.

Each user uploads a query photo (multipart field ``image``), waits for the answer and
sends the next one at once, so N users keep N requests in flight. An answer counts as
an error unless it is a 200 whose JSON holds ``k`` results (its ``took_ms``, the time the
service counts, is kept). The requests sent in the first ``--warmup`` seconds are left
out; the run stops by itself after ``--max-requests`` measured requests or locust's
``--run-time``, whichever comes first, and writes what it measured to
``--latencies-out`` (JSON).

    locust -f benchmarks/serve_load_locustfile.py --headless -u 8 -r 8 --run-time 70s \\
        --host http://127.0.0.1:8000 --queries queries.txt --warmup 10 \\
        --max-requests 100000 --latencies-out level.json
"""

import json
import time

import gevent
from locust import FastHttpUser, events, task

__all__ = ["SearchUser"]

BOUNDARY = "keras-dml-load-boundary"
_state = {"bodies": [], "latencies": [], "took": [], "errors": 0, "messages": [], "warm": 0,
          "start": None, "first": None, "last": None, "written": False}


@events.init_command_line_parser.add_listener
def _arguments(parser):
    parser.add_argument("--queries", default="", help="file with one query image path a line")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds left out")
    parser.add_argument("--max-requests", type=int, default=100_000,
                        help="measured requests after which the run stops")
    parser.add_argument("--latencies-out", default="", help="JSON file for the measurements")
    parser.add_argument("--k", type=int, default=10, help="results asked per request")


def multipart(image_bytes, filename="query.jpg"):
    """A multipart/form-data body with one file field ``image``."""
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"image\"; "
            f"filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n")
    return head.encode() + image_bytes + f"\r\n--{BOUNDARY}--\r\n".encode()


@events.test_start.add_listener
def _start(environment, **_):
    with open(environment.parsed_options.queries) as f:
        paths = [line.strip() for line in f if line.strip()]
    for path in paths:
        with open(path, "rb") as image:
            _state["bodies"].append(multipart(image.read()))
    _state["start"] = time.perf_counter()


@events.request.add_listener
def _record(response_time, exception, context, **_):
    options = context["environment"].parsed_options
    now = time.perf_counter()
    sent = now - response_time / 1000
    if sent - _state["start"] < options.warmup:
        _state["warm"] += 1
        return
    _state["first"] = _state["first"] or sent
    _state["last"] = now
    _state["latencies"].append(response_time)
    if exception is not None:
        _state["errors"] += 1
        if len(_state["messages"]) < 10:
            _state["messages"].append(str(exception)[:300])
    if len(_state["latencies"]) == options.max_requests:
        gevent.spawn(context["environment"].runner.quit)


@events.test_stop.add_listener
def _write(environment, **_):
    if _state["written"] or not environment.parsed_options.latencies_out:
        return
    _state["written"] = True
    measured = {"latencies_ms": _state["latencies"], "took_ms": _state["took"],
                "errors": _state["errors"],
                "error_messages": _state["messages"], "warmup_requests": _state["warm"],
                "window_s": (_state["last"] - _state["first"]) if _state["last"] else 0.0}
    with open(environment.parsed_options.latencies_out, "w") as f:
        json.dump(measured, f)


class SearchUser(FastHttpUser):
    """One client: the next query as soon as the previous answer is in."""

    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self):
        self.turn = id(self) % max(len(_state["bodies"]), 1)

    @task
    def search(self):
        options = self.environment.parsed_options
        body = _state["bodies"][self.turn % len(_state["bodies"])]
        self.turn += 1
        headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        with self.client.post(f"/search?k={options.k}", data=body, headers=headers,
                              name="/search", catch_response=True,
                              context={"environment": self.environment}) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            answer = response.json()
            if len(answer.get("results", [])) != options.k:
                response.failure(f"{len(answer.get('results', []))} results, "
                                 f"expected {options.k}")
            elif time.perf_counter() - _state["start"] >= options.warmup + answer["took_ms"] / 1000:
                _state["took"].append(answer["took_ms"])
