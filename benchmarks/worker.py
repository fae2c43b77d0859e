"""One system under test, in a process of its own: `python -m benchmarks.worker SPEC`.

SPEC is JSON: {"factory": "module:function", "kwargs": {...}}. The factory
module imports only its own framework (TensorFlow, torch or faiss). The thread
count is fixed by the environment the parent sets (see `processes.thread_env`).
The factory returns a callable running one timed unit of work (its result
materialised on the host) and optionally a dict of facts to report.

Protocol (one JSON line each way): the worker answers "ready" once built, then
for {"run": n} runs the unit n times and answers the n wall times in seconds
(with "lead_seconds": s, it first runs the unit untimed until s seconds have passed);
{"stats": true} answers resident-memory figures; {"reset_peak": true} resets the
peak (Linux: /proc/self/clear_refs) and answers the resident memory then, so a
later "stats" gives the peak of the calls in between; {"quit": true} ends it.
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
    rss_after_setup = memory_kb("VmRSS")
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
            _answer({"reset": reset_peak(), "rss_kb": memory_kb("VmRSS")}, out)
        elif "stats" in command:
            _answer({"rss_after_setup_kb": rss_after_setup, "peak_kb": memory_kb("VmHWM")}, out)
        else:
            break


if __name__ == "__main__":
    main()
