"""One system under test, in a process of its own: `python -m benchmarks.worker [SPEC]`.

SPEC is JSON: {"factory": "module:function", "kwargs": {...}}. The factory
module imports only its own framework (TensorFlow, torch or faiss; a Keras backend
through `benchmarks.on_jax`, `on_torch` or `on_tensorflow`). The thread count is fixed
by the environment the parent sets (see `processes.thread_env`). The factory returns a
callable running one timed unit of work (its result materialised on the host) and
optionally a dict of facts to report.

Protocol (one JSON line each way): the worker answers "ready" once built (at once,
without SPEC), then for {"build": SPEC} drops its unit, resets the memory peak, builds
the new one and answers "ready" with its facts (or {"error": its traceback}, and waits
for the next build) (one process per framework serves
many cases: `processes.Pool`); for {"run": n} runs the unit n times and answers the n
wall times in seconds
(with "lead_seconds": s, it first runs the unit untimed until s seconds have passed);
{"stats": true} answers memory figures; {"reset_peak": true} resets the peak and
answers the memory in use then, so a later "stats" gives the peak of the calls in
between; {"quit": true} ends it. Memory is the process's resident size (Linux:
VmRSS / VmHWM, reset through /proc/self/clear_refs), or on `--device gpu` the
bytes its framework's allocator holds on the first GPU.
"""

import ctypes
import gc
import importlib
import json
import os
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def memory_kb(field):
    """A field of /proc/self/status in kB (VmRSS, VmHWM), or 0 where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def release_free_memory():
    """Give the allocator's free memory back to the system (glibc's `malloc_trim`).

    A process that served a large unit keeps its freed heap otherwise: a PyTorch loss step
    at N = 4,096 left the process at 1.29 GB after its unit was dropped and collected, 0.55
    GB after the trim; at N = 8,192 two such workers held 9 GB each through the next case.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def reset_peak():
    """Reset VmHWM to the current resident size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _gpu_framework():
    """"torch", "tensorflow" or "jax": the framework this worker runs on a GPU, else None.

    The worker's Keras backend first (`KERAS_BACKEND`, set by `benchmarks.on_*`): a
    JAX worker may have imported TensorFlow too (keras_dml's tf.data pipelines)."""
    if os.environ.get("BENCH_DEVICE") != "gpu":
        return None
    order = ["torch", "tensorflow", "jax"]
    preferred = os.environ.get("KERAS_BACKEND")
    if preferred in order:
        order.remove(preferred)
        order.insert(0, preferred)
    for name in order:
        module = sys.modules.get(name)
        if module is not None and _GPU_CHECKS[name](module):
            return name
    return None


def _jax_gpus(jax):
    try:
        return jax.devices("gpu")
    except RuntimeError:  # "Unknown backend: 'gpu' requested"
        return []


_GPU_CHECKS = {"torch": lambda torch: torch.cuda.is_available(),
               "tensorflow": lambda tf: tf.config.list_logical_devices("GPU"),
               "jax": _jax_gpus}


class Memory:
    """The worker's memory figures in kB: its host resident size, or on `--device gpu`
    what its framework's allocator holds on the first GPU."""

    def __init__(self):
        self.framework = _gpu_framework()
        self.kind = "host resident" if self.framework is None else "GPU allocator"

    def _gpu_kb(self):
        """(in use, peak) of the GPU allocator."""
        if self.framework == "torch":
            cuda = sys.modules["torch"].cuda
            return cuda.memory_allocated() // 1024, cuda.max_memory_allocated() // 1024
        if self.framework == "jax":
            stats = _jax_gpus(sys.modules["jax"])[0].memory_stats() or {}
            return (stats.get("bytes_in_use", 0) // 1024,
                    stats.get("peak_bytes_in_use", 0) // 1024)
        info = sys.modules["tensorflow"].config.experimental.get_memory_info("GPU:0")
        return info["current"] // 1024, info["peak"] // 1024

    def in_use_kb(self):
        return memory_kb("VmRSS") if self.framework is None else self._gpu_kb()[0]

    def peak_kb(self):
        return memory_kb("VmHWM") if self.framework is None else self._gpu_kb()[1]

    def reset_peak(self):
        """Reset the peak to the memory in use; False where the kernel does not allow it."""
        if self.framework is None:
            return reset_peak()
        if self.framework == "jax":  # XLA's allocator keeps its peak for the process
            return False
        if self.framework == "torch":
            sys.modules["torch"].cuda.reset_peak_memory_stats()
        else:
            sys.modules["tensorflow"].config.experimental.reset_memory_stats("GPU:0")
        return True


def _answer(message, out):
    out.write(json.dumps(message) + "\n")
    out.flush()


def build(spec):
    """(unit, facts) of a SPEC."""
    module, function = spec["factory"].split(":")
    built = getattr(importlib.import_module(module), function)(**spec.get("kwargs", {}))
    return built if isinstance(built, tuple) else (built, {})


def main():
    # Replies go to the real stdout; anything the frameworks print goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    step, facts = build(json.loads(sys.argv[1])) if len(sys.argv) > 1 else (None, {})
    memory = Memory()
    after_setup = memory.in_use_kb()
    _answer({"ready": True, "facts": facts}, out)
    for line in sys.stdin:
        command = json.loads(line)
        if "build" in command:
            step = facts = None
            gc.collect()  # the previous unit's arrays go before the next one's arrive
            release_free_memory()
            memory = Memory()
            memory.reset_peak()
            try:
                step, facts = build(command["build"])
            except Exception:  # the case goes on without this system; the parent reports it
                _answer({"error": traceback.format_exc()[-4000:]}, out)
                continue
            memory = Memory()  # the unit may have imported the framework that holds the GPU
            after_setup = memory.in_use_kb()
            _answer({"ready": True, "facts": facts}, out)
        elif "run" in command:
            lead_until = time.perf_counter() + command.get("lead_seconds", 0.0)
            while time.perf_counter() < lead_until:
                step()
            times = []
            for _ in range(command["run"]):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            _answer({"times": times}, out)
        elif "reset_peak" in command:
            _answer({"reset": memory.reset_peak(), "in_use_kb": memory.in_use_kb()}, out)
        elif "stats" in command:
            _answer({"after_setup_kb": after_setup, "peak_kb": memory.peak_kb(),
                     "memory": memory.kind}, out)
        else:
            break


if __name__ == "__main__":
    main()
