"""faiss systems for `benchmarks.worker` (imports faiss and NumPy only).

With `--device gpu` (BENCH_DEVICE=gpu) the index runs on every visible GPU
(`faiss.index_cpu_to_all_gpus`). That needs a faiss built with GPU support
(faiss-gpu): with faiss-cpu the case stops with an error saying so, rather than
putting a CPU search into the GPU table.
"""

import os

import faiss

from benchmarks import data

_threads = int(os.environ.get("BENCH_THREADS", "0"))
if _threads:
    faiss.omp_set_num_threads(_threads)
ON_GPU = os.environ.get("BENCH_DEVICE") == "gpu"


def require_gpu():
    """Raise unless this faiss can search on a GPU (called on `--device gpu` only)."""
    if faiss.get_num_gpus() == 0:
        raise RuntimeError(
            f"--device gpu: faiss {faiss.__version__} sees no GPU (faiss-cpu, or no visible "
            "device), so the faiss peer would search on the CPU. Install faiss-gpu, or "
            "leave the faiss cases out with --only (--only losses data 'train steps').")


def inner_product_index(d, on_gpu=ON_GPU):
    """An exact inner-product index, `IndexFlatIP`: on every visible GPU with `on_gpu`."""
    index = faiss.IndexFlatIP(d)
    if not on_gpu:
        return index
    require_gpu()
    return faiss.index_cpu_to_all_gpus(index)


def flat_ip(n=20000, d=512, k=101, classes=5000):
    """Exact inner-product search of every row against all rows: `IndexFlatIP`."""
    x, _ = data.clustered(n, d, classes)

    def step():
        index = inner_product_index(d)
        index.add(x)
        return index.search(x, k)

    _, indices = step()
    return step, {"first_neighbours": indices[:20, :10].tolist()}
