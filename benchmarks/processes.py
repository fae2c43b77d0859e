"""Fair timing: every system in its own worker process, rounds interleaved.

`compare` starts one `benchmarks.worker` process per system (each imports only
its own framework, with the same thread count for TensorFlow, torch, faiss and
OpenMP through the environment), warms each up, then runs `repeats` rounds; in
each round every worker runs its unit once (or `inner` times), in a fresh
random order, while the others wait idle on a pipe, and each turn starts after a
pause that lets the previous worker's spinning thread pools fall asleep (and a
millisecond unit's turn with a short untimed lead-in that wakes its own). Load drift from other
processes on the machine thus hits every system alike, and no system shares an
address space, thread pool or allocator with another. Each worker times itself,
so the pipe is not in the figures.

`Pool` keeps one worker per system name alive across cases (`compare(..., pool=)`):
each case rebuilds its unit in the same process, so a framework's start-up (several
seconds for Keras, torch or JAX) is paid once per run, not once per case.

`alone` times one system with no other worker alive: the fairness check
compares it with the same system's figure from `compare`. `peak_memory` measures
one system's peak resident memory, first call and later calls apart.
"""

import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Pause before each worker's turn: the previous worker's thread pools (TensorFlow's
# Eigen pool, torch's OpenMP team, faiss' OpenMP) spin for a while after their last
# task before they sleep, and would otherwise take the cores from the next worker.
SETTLE_SECONDS = float(os.environ.get("BENCH_SETTLE", "0.2"))
# Untimed calls at the start of a turn of a millisecond unit (`inner` > 1): after the
# pause the cores and thread pools are cold, and a unit of a few milliseconds would
# be timed before they ramp up (TensorFlow's XLA step here: 7 ms for 4.6 ms warm).
# A training loop calls its step back to back: the lead-in times that steady state.
LEAD_SECONDS = float(os.environ.get("BENCH_LEAD", "0.1"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def thread_env(threads, device="cpu", root=ROOT):
    """Environment variables that give every framework `threads` threads.

    `device` "cpu" hides any GPU from every worker; "gpu" lets TensorFlow place
    ops on it (its default) and tells the torch systems to use CUDA. `root` is
    the source tree the worker imports first (`keras_dml` and `benchmarks`).
    """
    value = str(threads)
    env = dict(os.environ)
    env["BENCH_DEVICE"] = device
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:  # the workers share the GPU: none may take most of its memory up front
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX takes 75 % otherwise
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # TensorFlow takes all
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "TF_NUM_INTRAOP_THREADS", "BENCH_THREADS"):
        env[name] = value
    env["TF_NUM_INTEROP_THREADS"] = "1" if threads == 1 else "2"
    if threads == 1:  # XLA's CPU client (JAX) has no thread count, only one or all cores
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                            " intra_op_parallelism_threads=1").strip()
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # torch.compile's code generation in the worker itself: no pool of compiler processes
    # that outlives the compilation beside the timed systems
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # TensorFlow's oneDNN kernels, as `keras-dml` runs them (keras_dml.cli); TensorFlow
    # turns them on by itself only on CPUs with AVX-512 VNNI / BF16 or AMX.
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception)\b")


class BuildError(RuntimeError):
    """A live worker could not build a unit; the message is the worker's traceback."""

    def reason(self):
        """The exception's own line ("SomeError: message", the traceback's last such
        line), for a table cell."""
        lines = [line for line in str(self).splitlines() if _EXCEPTION_LINE.match(line)]
        return lines[-1] if lines else "unknown error"


class Worker:
    """A `benchmarks.worker` process running one system (`factory` None: none yet, see
    `build`), under `python` (default: this interpreter)."""

    def __init__(self, factory, kwargs, threads, device="cpu", root=ROOT, python=None,
                 env=None):
        spec = [] if factory is None else [json.dumps({"factory": factory, "kwargs": kwargs})]
        self.log = tempfile.TemporaryFile("w+")  # a pipe could fill and block the worker
        self.process = subprocess.Popen(
            [python or sys.executable, "-m", "benchmarks.worker", *spec], cwd=root,
            env={**thread_env(threads, device, root), **(env or {})}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log, text=True)
        self.facts = None

    def wait_ready(self):
        """Wait for the worker to build its system (its set-up runs the unit once).

        Raises:
            BuildError: the unit of a `start_build` failed to build (the worker lives on).
        """
        answer = self._receive()
        if "error" in answer:
            raise BuildError(answer["error"])
        self.facts = answer["facts"]
        return self

    def start_build(self, factory, kwargs):
        """Ask the worker to replace its unit by `factory(**kwargs)`; `wait_ready` answers."""
        self.process.stdin.write(json.dumps({"build": {"factory": factory,
                                                       "kwargs": kwargs}}) + "\n")
        self.process.stdin.flush()
        return self

    def _receive(self):
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            self.log.seek(0)
            error = self.log.read()
            raise RuntimeError(f"benchmark worker failed:\n{error[-3000:]}")
        return json.loads(line)

    def request(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._receive()

    def run(self, n, lead_seconds=0.0):
        return self.request(run=n, lead_seconds=lead_seconds)["times"]

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the worker's loop ends at end of input
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def summary(samples):
    """Median, lowest, highest and interquartile range of a list of times."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1],
            "q1": q[0], "q3": q[2], "n": len(ordered)}


def _measure(workers, repeats, warmup, inner, seed):
    for worker in workers.values():
        worker.run(warmup)
    rng = random.Random(seed)
    names = list(workers)
    samples = {name: [] for name in names}
    for _ in range(repeats):
        rng.shuffle(names)
        for name in names:
            time.sleep(SETTLE_SECONDS)
            lead = LEAD_SECONDS if inner > 1 else 0.0
            samples[name].append(statistics.median(workers[name].run(inner, lead)))
    stats = {name: workers[name].request(stats=True) for name in workers}
    return {name: {**summary(samples[name]), "samples": samples[name],
                   "memory": stats[name], "facts": workers[name].facts}
            for name in samples}


class Pool:
    """Live workers by system name, kept across cases; `close` ends them all.

    `failures` holds the systems of the last `build` that failed to build, {name: the
    exception's line}: the case runs without them (e.g. `torch.compile` cannot trace a
    loss), where a worker that died would stop the run. `pythons`: {name: interpreter}
    for systems that run under another Python than this one (another environment)."""

    def __init__(self, threads, device="cpu", pythons=None):
        self.threads, self.device, self.workers, self.failures = threads, device, {}, {}
        self.pythons = pythons or {}

    def build(self, systems):
        """{name: worker} with each system's unit built in its name's worker (started on
        first use), the builds side by side; the failed ones left out (`failures`)."""
        started = {}
        for name, (factory, kwargs) in systems.items():
            if name not in self.workers:
                self.workers[name] = Worker(None, None, self.threads, self.device,
                                            python=self.pythons.get(name)).wait_ready()
            started[name] = self.workers[name].start_build(factory, kwargs)
        workers, self.failures = {}, {}
        try:
            for name, worker in started.items():
                try:
                    workers[name] = worker.wait_ready()
                except BuildError as error:
                    self.failures[name] = error.reason()
                    print(f"[{name}] failed to build:\n{error}", file=sys.stderr, flush=True)
        except RuntimeError:
            self.close()  # a dead worker leaves the others' answers unread
            raise
        return workers

    def close(self):
        for worker in self.workers.values():
            worker.close()
        self.workers = {}


def compare(systems, repeats=7, warmup=1, inner=1, threads=2, seed=0, device="cpu",
            roots=None, pool=None, envs=None):
    """Time each system in its own process, rounds interleaved.

    Args:
        systems: {name: (factory "module:function", kwargs)}.
        repeats: rounds; each round gives one sample per system.
        warmup: untimed runs of each system before the first round.
        inner: runs per sample (the sample is their median), for short units.
        threads: thread count for every framework.
        device: "cpu" or "gpu" (see `thread_env`).
        roots: {name: source tree} for systems that import another tree than this
            one (see `benchmarks.compare_revisions`).
        pool: a `Pool` whose workers run the systems and stay alive (`threads` and
            `device` are the pool's).
        envs: {name: {variable: value}} set in that system's process on top of
            `thread_env` (e.g. `ONEDNN_MAX_CPU_ISA=AVX2`: another CPU kind, or
            `TF_ENABLE_ONEDNN_OPTS=0`); not with `pool`.

    Returns:
        {name: {"median", "min", "max", "q1", "q3", "n", "samples", "memory", "facts"}}.
    """
    if pool is not None:
        return _measure(pool.build(systems), repeats, warmup, inner, seed)
    workers = {}
    try:
        for name, (factory, kwargs) in systems.items():
            root = (roots or {}).get(name, ROOT)
            workers[name] = Worker(factory, kwargs, threads, device, root,
                                   env=(envs or {}).get(name))
        for worker in workers.values():  # set-ups run side by side, untimed
            worker.wait_ready()
        return _measure(workers, repeats, warmup, inner, seed)
    finally:
        for worker in workers.values():
            worker.close()


def alone(factory, kwargs, repeats=7, warmup=1, inner=1, threads=2, device="cpu"):
    """The same measurement for one system with no other worker alive."""
    return compare({"alone": (factory, kwargs)}, repeats, warmup, inner, threads,
                   device=device)["alone"]


def peak_memory(factory, kwargs, repeats=3, threads=2, device="cpu"):
    """Peak memory and time of one system's unit, in a process of its own.

    The first call (graph tracing, optimisation, XLA compilation, allocator growth)
    is measured apart: its peak beyond the set-up's resident memory. Then the peak
    is reset and the unit runs `repeats` more times: "steady" is their peak beyond
    the same set-up figure, what a warm step holds on top of the model and its
    inputs (the allocator's pools and compiled code included: freed memory that
    stays resident after the first call is counted, not hidden).

    Memory is the process's resident size, or on `device="gpu"` what its framework's
    allocator holds on the GPU ("memory" names which).

    Returns:
        {"memory", "first_call": {"seconds", "peak_kb"}, "steady": {summary of the
        times, "peak_kb"}}; "peak_kb" is None where the peak cannot be reset (not Linux).
    """
    worker = Worker(factory, kwargs, threads, device)
    try:
        worker.wait_ready()
        first = worker.run(1)[0]
        stats = worker.request(stats=True)
        reset = worker.request(reset_peak=True)
        times = worker.run(repeats)
        after = worker.request(stats=True)
    finally:
        worker.close()
    return {"memory": stats["memory"],
            "first_call": {"seconds": first,
                           "peak_kb": stats["peak_kb"] - stats["after_setup_kb"]},
            "steady": {**summary(times), "samples": times,
                       "peak_kb": after["peak_kb"] - stats["after_setup_kb"]
                       if reset["reset"] else None}}
