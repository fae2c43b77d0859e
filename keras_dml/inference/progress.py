"""`Progress`: the one progress line of every embedding (Python and `keras-dml` commands).

On a terminal it redraws one line (images done of the total, images per
second, time left); written to a file or a pipe (a batch job's log) it prints
a plain line every `interval` seconds instead, so long runs still show
progress without filling the log.
"""

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Images done, images per second and time left, on stderr.

    Args:
        total: Images to embed, or None when unknown (no time left is shown).
        enabled: False draws nothing (rate and seconds are still measured).
            Defaults to True.
        stream: Defaults to `sys.stderr`.
        interval: Seconds between two plain lines when `stream` is not a
            terminal. Defaults to 15.
        start: Images already done before this run (a resumed job): counted in
            the line, not in the rate. Defaults to 0.

    Examples:

    >>> bar = Progress(100, enabled=False)
    >>> bar.update(40)
    >>> bar.done, bar.total
    (40, 100)
    """

    def __init__(self, total, enabled=True, stream=None, interval=15.0, start=0):
        self.total, self.done, self.start = total, start, start
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.terminal = enabled and _isatty(self.stream)
        self.interval = interval
        self.started = time.perf_counter()
        self._last_line = self.started

    @property
    def seconds(self):
        return time.perf_counter() - self.started

    @property
    def rate(self):
        """Images per second in this run."""
        return (self.done - self.start) / max(self.seconds, 1e-9)

    def update(self, count):
        """Counts `count` more images and redraws (terminal) or, every `interval`
        seconds, prints a line (file or pipe)."""
        self.done += count
        if self.terminal:
            self.stream.write("\r" + self.line() + " ")
            self.stream.flush()
        elif self.enabled and time.perf_counter() - self._last_line >= self.interval:
            self._last_line = time.perf_counter()
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def line(self):
        """`"done/total [====    ] X images/s, S s left"` (without a total: `"done images,
        X images/s"`)."""
        if not self.total:
            return f"{self.done} images, {self.rate:.1f} images/s"
        width = 30
        filled = int(width * min(self.done, self.total) / self.total)
        left = max(self.total - self.done, 0) / max(self.rate, 1e-9)
        return (f"{self.done}/{self.total} [{'=' * filled:<{width}}] {self.rate:.1f} images/s, "
                f"{left:.0f} s left")

    def close(self):
        if self.terminal:
            self.stream.write("\n")
            self.stream.flush()


def _isatty(stream):
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
