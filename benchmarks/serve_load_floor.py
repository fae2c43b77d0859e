"""The floor of `benchmarks/serve_load.py`: the bare glue script, one request at a time.

Loads ``examples/serve_glue.py`` (a SavedModel and a pymilvus client, no keras_dml), runs
its ``search`` on the query photos one after another, unmeasured for ``--warmup`` seconds
(and at least 10 requests), then for ``--duration`` seconds or ``--max-requests``
requests, and writes the latencies, its own resident memory (sampled each second) and
the median time of its two halves (the SavedModel, the Milvus search) to ``--out`` (JSON).

    python -m benchmarks.serve_load_floor SAVEDMODEL URI COLLECTION queries.txt --out floor.json
"""

import argparse
import importlib.util
import json
import os
import time

import numpy as np
import psutil

__all__ = ["load_glue", "measure"]

GLUE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                    "serve_glue.py")


def load_glue(path=GLUE):
    """The glue script's module, imported from its file."""
    spec = importlib.util.spec_from_file_location("serve_glue", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(search, queries, warmup, duration, max_requests, k):
    """Latencies (ms) of ``search(image_bytes, k)`` over ``queries`` in turn, after
    ``warmup`` seconds, with the process's RSS (MB) each second."""
    process = psutil.Process()
    start = time.perf_counter()
    turn = 0
    while time.perf_counter() - start < warmup or turn < 10:
        search(queries[turn % len(queries)], k)
        turn += 1
    latencies, rss, errors, messages = [], [], 0, []
    begin = time.perf_counter()
    next_sample = begin
    while time.perf_counter() - begin < duration and len(latencies) < max_requests:
        now = time.perf_counter()
        if now >= next_sample:
            rss.append((now - begin, process.memory_info().rss / 2**20))
            next_sample += 1.0
        try:
            hits = search(queries[turn % len(queries)], k)
            if len(hits) != k:
                raise ValueError(f"{len(hits)} results, expected {k}")
        except Exception as error:  # counted, as the load test counts a failed request
            errors += 1
            messages.append(str(error)[:300])
        latencies.append((time.perf_counter() - now) * 1000)
        turn += 1
    return {"latencies_ms": latencies, "window_s": time.perf_counter() - begin,
            "errors": errors, "error_messages": messages[:10], "warmup_requests": turn
            - len(latencies), "rss_mb": rss}


def components(glue, queries, k, count=30):
    """Median milliseconds of the glue's two halves over ``count`` queries: the
    SavedModel (decode, preprocessing, forward pass) and the Milvus search."""
    import tensorflow as tf

    embed, search = [], []
    for image in (queries * count)[:count]:
        start = time.perf_counter()
        vector = glue.embed(image_bytes=tf.constant([image]))["embedding"][0].numpy().tolist()
        middle = time.perf_counter()
        glue.client.search(glue.collection, data=[vector], limit=k, anns_field="vector",
                           output_fields=["label", "metadata"])
        search.append((time.perf_counter() - middle) * 1000)
        embed.append((middle - start) * 1000)
    return {"savedmodel_ms": round(float(np.median(embed)), 2),
            "milvus_search_ms": round(float(np.median(search)), 2)}


def main(argv=None):
    """Loads the glue, measures it and writes the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("savedmodel", "uri", "collection", "queries"):
        parser.add_argument(name)
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    glue = load_glue().Glue(args.savedmodel, args.uri, args.collection)
    ready_s = time.perf_counter() - started
    with open(args.queries) as f:
        queries = [open(line.strip(), "rb").read() for line in f if line.strip()]
    result = measure(glue.search, queries, args.warmup, args.duration, args.max_requests, args.k)
    result.update(ready_s=ready_s, components=components(glue, queries, args.k))
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
