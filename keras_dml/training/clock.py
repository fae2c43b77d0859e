"""`Clock`: wall and CPU seconds per named phase of a run (its summary's `timings`)."""

import contextlib
import time

__all__ = ["Clock"]


class Clock:
    """Wall and process CPU seconds per named phase (CPU time counts every thread)."""

    def __init__(self):
        self.phases = {}

    @contextlib.contextmanager
    def phase(self, name):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            before = self.phases.get(name, {"seconds": 0.0, "cpu_seconds": 0.0, "count": 0})
            self.phases[name] = {
                "seconds": before["seconds"] + time.perf_counter() - wall,
                "cpu_seconds": before["cpu_seconds"] + time.process_time() - cpu,
                "count": before["count"] + 1}

    def rounded(self):
        return {name: {k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()}
                for name, p in self.phases.items()}
