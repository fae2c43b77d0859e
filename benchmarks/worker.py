"""One system under test, in a process of its own: `python -m benchmarks.worker SPEC`.

SPEC is JSON: {"factory": "module:function", "kwargs": {...}}. The factory
module imports only its own framework (TensorFlow, torch or faiss). The thread
count is fixed by the environment the parent sets (see `processes.thread_env`).
The factory returns a callable running one timed unit of work (its result
materialised on the host) and optionally a dict of facts to report.

Protocol (one JSON line each way): the worker answers "ready" once built, then
for {"run": n} runs the unit n times and answers the n wall times in seconds
(with "lead_seconds": s, it first runs the unit untimed until s seconds have passed);
{"stats": true} answers memory figures; {"reset_peak": true} resets the peak and
answers the memory in use then, so a later "stats" gives the peak of the calls in
between; {"quit": true} ends it. Memory is the process's resident size (Linux:
VmRSS / VmHWM, reset through /proc/self/clear_refs), or on `--device gpu` the
bytes its framework's allocator holds on the first GPU.
"""

import importlib
import json
import os
import sys
import time

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


def reset_peak():
    """Reset VmHWM to the current resident size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _gpu_framework():
    """"torch" or "tensorflow": the framework this worker runs on a GPU, else None."""
    if os.environ.get("BENCH_DEVICE") != "gpu":
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return "torch"
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.config.list_logical_devices("GPU"):
        return "tensorflow"
    return None


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
        if self.framework == "torch":
            sys.modules["torch"].cuda.reset_peak_memory_stats()
        else:
            sys.modules["tensorflow"].config.experimental.reset_memory_stats("GPU:0")
        return True


def _answer(message, out):
    out.write(json.dumps(message) + "\n")
    out.flush()


def main():
    spec = json.loads(sys.argv[1])
    # Replies go to the real stdout; anything the frameworks print goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    module, function = spec["factory"].split(":")
    built = getattr(importlib.import_module(module), function)(**spec.get("kwargs", {}))
    step, facts = built if isinstance(built, tuple) else (built, {})
    memory = Memory()
    after_setup = memory.in_use_kb()
    _answer({"ready": True, "facts": facts}, out)
    for line in sys.stdin:
        command = json.loads(line)
        if "run" in command:
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
