"""faiss systems for `benchmarks.worker` (imports faiss and NumPy only)."""

import os

import faiss

from benchmarks import data

_threads = int(os.environ.get("BENCH_THREADS", "0"))
if _threads:
    faiss.omp_set_num_threads(_threads)


def flat_ip(n=20000, d=512, k=101, classes=5000):
    """Exact inner-product search of every row against all rows: `IndexFlatIP`."""
    x, _ = data.clustered(n, d, classes)

    def step():
        index = faiss.IndexFlatIP(d)
        index.add(x)
        return index.search(x, k)

    _, indices = step()
    return step, {"first_neighbours": indices[:20, :10].tolist()}
