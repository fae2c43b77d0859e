"""Milvus servers for the fault and server-road tests: `milvus-lite server` and a Milvus
standalone (`milvus-server`, from `pip install milvus`), each on free loopback ports,
started from a test and stopped by process id (its children too), every wait bounded.

`Server.stop()` / `start()` restart one on the same data; `freeze()` / `thaw()` send
SIGSTOP / SIGCONT to every process of it."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from benchmarks.bench_catalogue_memory import descendants

#: A Milvus standalone listens on localhost:2379 and 2380 (its embedded etcd) and locks
#: /run/milvus/standalone.pid whatever its options: one runs on a machine at a time, so
#: a test process holds this file's lock while its standalone runs (pytest-xdist workers
#: take turns), and waits for it at most `LOCK_SECONDS`.
STANDALONE_LOCK = "/tmp/keras_dml_milvus_standalone.lock"
LOCK_SECONDS = 1200.0
#: Seconds a server may take to answer after it starts (a standalone starts in tens).
START_SECONDS = {"lite": 60.0, "standalone": 240.0}
STOP_SECONDS = 30.0


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Server:
    """A Milvus server of `kind` ("lite" or "standalone") serving `data` on loopback.

    Attributes:
        uri: `http://127.0.0.1:PORT`, the same across restarts.
    """

    def __init__(self, kind, data):
        self.kind, self.data = kind, str(data)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self._ports = {}  # standalone: its other ports, kept across restarts
        self._process = None
        self._log = None
        self._lock = _machine_lock() if kind == "standalone" else None
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def close(self):
        """Stops the server for good (and lets another test process run a standalone):
        its data is the test's, so it is not waited for long."""
        self.stop(wait=2.0)
        if self._lock is not None:
            self._lock.close()  # closing the file releases its lock
            self._lock = None

    def _command(self):
        """`(command, environment)` that starts the server."""
        if self.kind == "lite":
            return [sys.executable, "-m", "milvus_lite", "server", "--data-dir", self.data,
                    "--host", "127.0.0.1", "--port", str(self.port)], None
        binary = os.path.join(self.data, "bin", "milvus")
        if self._ports and os.path.isfile(binary):
            # Started again: the Milvus binary itself on the configuration milvus-server
            # wrote, as a service manager would run it. milvus-server checks each port by
            # binding it without SO_REUSEADDR, which fails while the stopped server's
            # connections linger in TIME_WAIT, and then moves the proxy to another port.
            library = os.path.dirname(binary)
            return [binary, "run", "standalone"], {
                **os.environ, "DEPLOY_MODE": "STANDALONE", "METRICS_PORT": str(free_port()),
                "MILVUS_RUN_DIR": os.path.join(self.data, "run"),
                "LD_LIBRARY_PATH": os.pathsep.join(
                    filter(None, [library, os.environ.get("LD_LIBRARY_PATH")]))}
        if not self._ports:
            self._ports = {name: free_port() for name in (
                "etcd-port", "root-coord-port", "proxy-internal-port", "query-coord-port",
                "query-node-port", "index-coord-port", "index-node-port", "data-coord-port",
                "data-node-port")}
        command = [shutil.which("milvus-server") or "milvus-server", "--data", self.data,
                   "--proxy-port", str(self.port)]
        for name, port in self._ports.items():
            command += [f"--{name}", str(port)]
        return command, None

    def start(self):
        """Starts the server (again) and waits until its port answers and it serves."""
        os.makedirs(self.data, exist_ok=True)
        self._log = open(os.path.join(os.path.dirname(self.data) or ".",
                                      f"{os.path.basename(self.data)}.{self.kind}.log"), "ab")
        command, environment = self._command()
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=environment, cwd=self.data)
        deadline = time.monotonic() + START_SECONDS[self.kind]
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.kind} Milvus exited with {self._process.returncode}:"
                                   f" {self.log_tail()}")
            if _answers(self.port) and self._serves():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.kind} Milvus did not serve within "
                           f"{START_SECONDS[self.kind]:.0f} s: {self.log_tail()}")

    def _serves(self):
        from pymilvus import MilvusClient

        try:
            client = MilvusClient(uri=self.uri, timeout=5)
            client.list_collections(timeout=5)
            client.close()
            return True
        except Exception:
            return False

    def log_tail(self, lines=5):
        try:
            with open(self._log.name, errors="replace") as f:
                return " | ".join(f.read().splitlines()[-lines:])
        except OSError:
            return ""

    def _pids(self):
        if self._process is None or self._process.poll() is not None:
            return []
        return [self._process.pid, *descendants(self._process.pid)]

    def freeze(self):
        for pid in self._pids():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self):
        for pid in self._pids():
            os.kill(pid, signal.SIGCONT)

    def stop(self, wait=STOP_SECONDS):
        """Stops the server and its children by pid: SIGTERM, `wait` seconds at most for
        each to end cleanly (a standalone gives up its etcd sessions then, which its next
        start needs), then SIGKILL."""
        if self._process is None:
            return
        pids = self._pids()
        for pid in reversed(pids):  # thawed first: a frozen process ignores SIGTERM
            with _gone():
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self._process.poll()
            if not any(os.path.exists(f"/proc/{pid}") and _running(pid) for pid in pids):
                break
            time.sleep(0.2)
        for pid in pids:
            with _gone():
                os.kill(pid, signal.SIGKILL)
        with _gone():
            self._process.wait(timeout=STOP_SECONDS)
        self._process = None
        self._log.close()
        deadline = time.monotonic() + STOP_SECONDS
        while _answers(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)


def _running(pid):
    """Whether `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _machine_lock():
    """The open file holding `STANDALONE_LOCK` (waits for another holder, bounded)."""
    import fcntl

    lock = open(STANDALONE_LOCK, "a")
    deadline = time.monotonic() + LOCK_SECONDS
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() > deadline:
                lock.close()
                raise RuntimeError(f"another process held {STANDALONE_LOCK} (a Milvus "
                                   f"standalone) for {LOCK_SECONDS:.0f} s") from None
            time.sleep(1.0)


class _gone:
    """Ignores a process that already exited."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        return kind is not None and issubclass(kind, (ProcessLookupError,
                                                      subprocess.TimeoutExpired))


def empty(uri):
    """Drops every alias and collection of the server at `uri` (a shared server between
    tests)."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri, timeout=30)
    try:
        for alias in client.list_aliases(timeout=30)["aliases"]:
            client.drop_alias(alias, timeout=30)
        for name in client.list_collections(timeout=30):
            client.drop_collection(name, timeout=30)
    finally:
        client.close()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A Milvus standalone for the tests of one module (it starts in tens of seconds);
    each test takes it with `standalone_uri`, which empties it afterwards."""
    if shutil.which("milvus-server") is None:
        pytest.fail("milvus-server is not on PATH: pip install \"keras_dml[milvus-server]\"")
    server = Server("standalone", tmp_path_factory.mktemp("standalone") / "milvus")
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def standalone_uri(request):
    """The URI of the module's `standalone` fixture, emptied when the test is done."""
    server = request.getfixturevalue("standalone")
    try:
        yield server.uri
    finally:
        empty(server.uri)
