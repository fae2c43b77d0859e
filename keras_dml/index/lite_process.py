"""A Milvus Lite database served from a child process, so its memory stays out of ours.

Milvus Lite 3.2 is a pure-Python engine that runs inside the process opening
the `.db` folder (a gRPC server on a thread): it keeps every flushed segment
loaded (the Parquet table, the vectors as a NumPy array, the primary keys as
a Python list and a key-to-row dict), so its memory grows with the
collection. `LiteProcess` runs that engine in a child Python process instead
(this file run as a script: it imports neither keras_dml nor Keras), and the
client talks to it over a loopback port: the parent's memory then follows
what the parent holds, and the child's the collection.

The child serves until its standard input closes: `LiteProcess.stop()`, the
parent's exit, or the parent being killed all close it, and the child then
flushes and closes the database cleanly.

Examples:
    >>> server = LiteProcess("catalogue.db")  # doctest: +SKIP
    >>> client = MilvusClient(uri=server.uri)  # doctest: +SKIP
    >>> server.stop()  # doctest: +SKIP
"""

import os
import select
import subprocess
import sys
import time

__all__ = ["CHILD_ENV", "LiteProcess", "WAITING"]

#: Seconds the child may take to open the database and report its port.
START_TIMEOUT = 60.0
#: Seconds to wait for a database another process is closing (e.g. the child of a
#: killed command, still flushing) before calling it open elsewhere.
LOCK_WAIT = 10.0
#: The line printed when the database is open in another process, before waiting.
WAITING = ("keras_dml: {path} is open in another process; waiting up to {seconds:.0f} s for "
           "it. Milvus Lite opens a database in one process at a time: to search a catalogue "
           "while it is updated, serve it (milvus-lite server --data-dir {path} --port 19530) "
           "and give every command --uri http://127.0.0.1:19530.")
#: Seconds the child may take to flush and close on `stop()` before it is killed.
STOP_TIMEOUT = 60.0
#: The child's memory settings. Milvus Lite holds inserted rows in a MemTable (Arrow
#: buffers plus a key index) until its estimate reaches 128 MB or its write-ahead log
#: 256 MB: about 200,000 rows of 128-d vectors, so a catalogue of that size was never
#: flushed before the end, and the child then held every row twice or three times
#: (MemTable, the table being written, the loaded segment). 16 MB flushes every ~25,000
#: such rows. PyArrow's default pool (mimalloc or jemalloc) keeps what it freed after
#: each Parquet read or write, and glibc keeps freed heap in up to 8 arenas per core:
#: Arrow on the system allocator, two arenas, freed memory over 128 KB returned at once.
#: Figures: docs/guide/beyond_one_machine.md, "What each store costs".
CHILD_ENV = {"MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES": str(16 << 20),
             "MILVUS_LITE_WAL_SIZE_LIMIT_BYTES": str(32 << 20),
             "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "2",
             "MALLOC_TRIM_THRESHOLD_": "131072"}


class LiteProcess:
    """A child process serving the Milvus Lite database at `path` on a loopback port.

    Args:
        path: The `.db` folder (absolute or relative).
        locked: `locked(path)`: whether another process holds the database.

    Attributes:
        uri: `http://127.0.0.1:<port>`, for `pymilvus.MilvusClient(uri=...)`.
        pid: The child's process id.

    Raises:
        RuntimeError: The database is open in another process, or the child could
            not open it (the message carries the child's last line of error).
    """

    def __init__(self, path, locked):
        self.path = os.path.abspath(path)
        deadline = time.monotonic() + LOCK_WAIT
        if locked(self.path):
            print(WAITING.format(path=self.path, seconds=LOCK_WAIT), file=sys.stderr,
                  flush=True)
        while locked(self.path) and time.monotonic() < deadline:
            time.sleep(0.2)
        self._child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**CHILD_ENV, **os.environ})  # a setting the user made wins
        self.pid = self._child.pid
        try:
            self.uri = f"http://127.0.0.1:{self._port()}"
        except BaseException:
            self.stop()
            raise

    def _port(self):
        """The port line the child prints once it serves, or its error."""
        ready, _, _ = select.select([self._child.stdout], [], [], START_TIMEOUT)
        line = self._child.stdout.readline() if ready else ""
        if line.startswith("port "):
            return int(line.split()[1])
        if not ready:
            raise RuntimeError(f"Milvus Lite did not open {self.path} within "
                               f"{START_TIMEOUT:.0f} s.")
        self._child.wait(timeout=STOP_TIMEOUT)
        errors = [e for e in self._child.stderr.read().splitlines() if e.strip()]
        raise RuntimeError(errors[-1] if errors else
                           f"Milvus Lite exited with status {self._child.returncode}.")

    def stop(self):
        """Closes the child's input: it flushes, closes the database and exits."""
        if self._child.poll() is None:
            try:
                self._child.stdin.close()
                self._child.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        for stream in (self._child.stdin, self._child.stdout, self._child.stderr):
            stream.close()


def serve(path):
    """The child: serves `path` on a free loopback port until standard input closes."""
    import logging

    logging.disable(logging.CRITICAL)  # the parent reports errors in one line
    try:
        from milvus_lite.adapter.grpc.server import start_server_in_thread

        server, db, port = start_server_in_thread(data_dir=path, host="127.0.0.1", port=0)
    except Exception as error:  # the parent shows this line
        print(" ".join(str(error).split()) or type(error).__name__, file=sys.stderr)
        return 1
    print(f"port {port}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes it, exits or is killed
    finally:
        server.stop(grace=5).wait()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
