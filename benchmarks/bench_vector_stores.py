"""Vector stores for a catalogue index: faiss flat and HNSW against Milvus Lite FLAT and HNSW.

Each system runs in its own process on the same data: a gallery of unit
vectors (seeded Gaussian, built in blocks; or real embeddings from a `.npy`
file or a saved `keras-dml index` directory, whose first `--q` rows become the
queries) and the same queries. A worker measures:

- insertion: vectors per second until the store is searchable with its index
  (faiss: `add`, HNSW graph included; Milvus Lite: `insert` in batches of
  `--batch` rows as dicts, `flush`, and the wait until its background thread
  has built every segment's index file), then the first search's time;
- queries per second for one batch of `--q` queries and for `--single` queries
  sent one at a time;
- recall@k against exact search (computed in the parent with NumPy, blockwise);
- peak resident memory of the process (VmHWM: Milvus Lite runs in-process) and
  the size on disk (faiss: `write_index`; Milvus Lite: its database folder).

    nice -n 10 python benchmarks/bench_vector_stores.py              # 1,000,000 x 128
    python benchmarks/bench_vector_stores.py --embeddings runs/r/index  # real embeddings
    python benchmarks/bench_vector_stores.py --quick                 # 20,000 x 32

HNSW settings are `Index`'s defaults for faiss_hnsw (M 32, efConstruction 80,
efSearch 64), the same for Milvus Lite.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SYSTEMS = ("faiss_flat", "milvus_flat", "faiss_hnsw", "milvus_hnsw")
HNSW = {"M": 32, "efConstruction": 80, "ef": 64}


def _memory_mb(key="VmHWM"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _unit(block):
    return block / np.linalg.norm(block, axis=1, keepdims=True)


def load_data(n, d, q, embeddings=None, seed=0):
    """`(gallery, queries)` float32 unit rows: synthetic (seeded, in blocks) or the
    rows of `embeddings` (a `.npy` file or an index directory), the first `q` as queries."""
    if embeddings:
        path = embeddings
        if os.path.isdir(path):
            path = os.path.join(path, "embeddings.npy")
        rows = _unit(np.load(path, allow_pickle=False).astype(np.float32))
        return np.ascontiguousarray(rows[q:]), np.ascontiguousarray(rows[:q])
    rng = np.random.default_rng(seed)
    gallery = np.empty((n, d), np.float32)
    for start in range(0, n, 65536):
        gallery[start:start + 65536] = _unit(
            rng.standard_normal((min(65536, n - start), d), dtype=np.float32))
    return gallery, _unit(rng.standard_normal((q, d), dtype=np.float32))


def exact_top_k(gallery, queries, k, block=131072):
    """The exact top-k rows by inner product (unit rows: cosine), blockwise."""
    best_ids = np.zeros((len(queries), 0), np.int64)
    best = np.zeros((len(queries), 0), np.float32)
    for start in range(0, len(gallery), block):
        scores = queries @ gallery[start:start + block].T
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        best = np.concatenate([best, np.take_along_axis(scores, top, 1)], 1)
        best_ids = np.concatenate([best_ids, top + start], 1)
        keep = np.argsort(-best, axis=1, kind="stable")[:, :k]
        best, best_ids = np.take_along_axis(best, keep, 1), np.take_along_axis(best_ids, keep, 1)
    return best_ids


class Faiss:
    def __init__(self, kind, d, folder):
        import faiss

        self.faiss, self.folder = faiss, folder
        if kind == "flat":
            self.index = faiss.IndexFlatIP(d)
        else:
            self.index = faiss.IndexHNSWFlat(d, HNSW["M"], faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = HNSW["efConstruction"]
            self.index.hnsw.efSearch = HNSW["ef"]

    def insert(self, gallery, batch):
        for start in range(0, len(gallery), batch):
            self.index.add(gallery[start:start + batch])

    def search(self, queries, k):
        return self.index.search(queries, k)[1]

    def size_bytes(self):
        path = os.path.join(self.folder, "index.faiss")
        self.faiss.write_index(self.index, path)
        return os.path.getsize(path)


class MilvusLite:
    def __init__(self, kind, d, folder):
        from pymilvus import DataType, MilvusClient

        self.path = os.path.join(folder, "catalogue.db")
        self.client = MilvusClient(self.path)
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=d)
        params = self.client.prepare_index_params()
        if kind == "flat":
            params.add_index("vector", index_type="FLAT", metric_type="IP")
            self.search_params = {}
        else:
            params.add_index("vector", index_type="HNSW", metric_type="IP",
                             params={"M": HNSW["M"], "efConstruction": HNSW["efConstruction"]})
            self.search_params = {"params": {"ef": HNSW["ef"]}}
        self.client.create_collection("items", schema=schema, index_params=params)

    def insert(self, gallery, batch):
        for start in range(0, len(gallery), batch):
            rows = gallery[start:start + batch]
            self.client.insert("items", [{"id": start + i, "vector": row}
                                         for i, row in enumerate(rows.tolist())])
        self.client.flush("items")
        self._wait_for_index_files()

    def _wait_for_index_files(self, timeout=3600):
        """Milvus Lite builds each flushed segment's index in a background thread, and
        searches a segment by brute force until then: wait until every data file has
        its index file, so searches measure the index asked for."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            files = [name for _, _, names in os.walk(self.path) for name in names]
            data = sum(name.endswith(".parquet") and name.startswith("data_") for name in files)
            if data and sum(name.endswith(".idx") for name in files) >= data:
                return
            time.sleep(0.2)
        raise TimeoutError(f"Milvus Lite built no index within {timeout} s")

    def search(self, queries, k):
        hits = self.client.search("items", queries.tolist(), limit=k,
                                  search_params=self.search_params)
        return np.asarray([[hit["id"] for hit in row] for row in hits], np.int64)

    def size_bytes(self):
        self.client.close()
        return sum(os.path.getsize(os.path.join(root, name))
                   for root, _, names in os.walk(self.path) for name in names)


def worker(system, args):
    """One system's figures (a dict), measured in this process."""
    gallery, queries = load_data(args.n, args.d, args.q, args.embeddings)
    folder = tempfile.mkdtemp(prefix=f"bench_{system}_", dir=args.scratch)
    try:
        kind = system.split("_")[1]
        store = (Faiss if system.startswith("faiss") else MilvusLite)(kind, gallery.shape[1],
                                                                       folder)
        start = time.perf_counter()
        store.insert(gallery, args.batch)
        insert_s = time.perf_counter() - start
        n = len(gallery)
        del gallery
        start = time.perf_counter()
        store.search(queries[:1], args.k)  # builds what a first search needs
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        ids = store.search(queries, args.k)
        batch_s = time.perf_counter() - start
        single = queries[:args.single]
        start = time.perf_counter()
        for row in single:
            store.search(row[None], args.k)
        single_s = time.perf_counter() - start
        size = store.size_bytes()
        return {"system": system, "n": n, "insert_per_s": n / insert_s, "first_search_s": first_s,
                "batch_qps": len(queries) / batch_s, "single_qps": len(single) / single_s,
                "peak_mb": _memory_mb(), "size_mb": size / 2**20, "ids": ids.tolist()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(system, args, argv):
    command = [sys.executable, os.path.abspath(__file__), *argv, "--worker", system]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{system} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine():
    """`"CPU model, N cores"` from /proc/cpuinfo."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


TABLE_HEAD = ("| system | insert (vectors/s) | first search (s) | batch QPS | single QPS | "
              "recall@10 | peak memory (MB) | on disk (MB) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|")


def row(r, recall):
    """One system's Markdown table row."""
    return (f"| {r['system']} | {r['insert_per_s']:,.0f} | {r['first_search_s']:.2f} | "
            f"{r['batch_qps']:,.0f} | {r['single_qps']:,.0f} | {recall:.3f} | "
            f"{r['peak_mb']:,.0f} | {r['size_mb']:,.0f} |")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 x 32, 200 queries")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--q", type=int, default=1000, help="batch queries (default 1000)")
    parser.add_argument("--single", type=int, default=200,
                        help="queries sent one at a time (default 200)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per insert call")
    parser.add_argument("--embeddings", default=None,
                        help="real embeddings: a .npy (n, d) or a `keras-dml index` directory")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--scratch", default=None, help="folder for the stores' files")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.d, args.q, args.single = 20_000, 32, 200, 50
        argv = [a for a in argv if a != "--quick"] + ["--n", "20000", "--d", "32", "--q", "200",
                                                      "--single", "50"]
    if args.worker:
        os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
        print(json.dumps(worker(args.worker, args)))
        return 0
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose among {', '.join(SYSTEMS)}")
    load = os.getloadavg()[0]
    gallery, queries = load_data(args.n, args.d, args.q, args.embeddings)
    exact = exact_top_k(gallery, queries, args.k).tolist()
    shape = gallery.shape
    del gallery
    source = args.embeddings or "synthetic unit Gaussian"
    print(f"{shape[0]:,} x {shape[1]} ({source}), {len(queries)} batch queries, "
          f"{args.single} single, k={args.k}; {machine()}; load average {load:.2f} at start",
          flush=True)
    header, rule = TABLE_HEAD
    print(header + "\n" + rule, flush=True)
    results, recalls = [], {}
    for system in systems:  # each row as soon as its process ends
        result = _run(system, args, argv)
        recalls[system] = float(np.mean([len(set(a) & set(b)) / args.k
                                         for a, b in zip(result.pop("ids"), exact)]))
        result["load_after"] = os.getloadavg()[0]
        results.append(result)
        print(row(result, recalls[system]), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"shape": shape, "source": source, "machine": machine(),
                           "load": load, "results": results, "recalls": recalls}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
