"""Fixtures of the Python module's tests: rdmx-kvd in a process of its own.

Each server listens on a free loopback port (127.0.0.1:0: the kernel picks
it; the server prints it) and is killed by its PID at teardown. The tests
run over every transport in RDMX_TRANSPORT (one of tcp, shm) or, when it is
not set, over both. The binaries come from RDMX_BIN_DIR, else build/bin.
"""
import os
import select
import signal
import subprocess
import time

import pytest

import rdmx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.environ.get("RDMX_BIN_DIR", os.path.join(ROOT, "build", "bin"))
TRANSPORTS = [os.environ["RDMX_TRANSPORT"]] if os.environ.get("RDMX_TRANSPORT") else ["tcp", "shm"]
# Never leave loopback.
os.environ.setdefault("UCX_NET_DEVICES", "lo")


class Kvd:
    """One rdmx-kvd process: its address, transport and PID."""

    def __init__(self, transport, *extra):
        env = dict(os.environ, RDMX_TRANSPORT=transport, UCX_NET_DEVICES="lo")
        self.transport = transport
        self.proc = subprocess.Popen(
            [os.path.join(BIN_DIR, "rdmx-kvd"), "--listen", "127.0.0.1:0",
             "--workers", "1", "--memory", "64m", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        self.address = self._read_address(timeout=30)

    def _read_address(self, timeout):
        deadline = time.monotonic() + timeout
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    break
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            seen += line
            if b"listening on " in line:
                return line.split(b"listening on ")[1].split()[0].decode()
        self.kill()
        raise RuntimeError("rdmx-kvd did not start: %r" % seen)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture(scope="module", params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture(scope="module")
def kvd(transport):
    """A server shared by a test module, per transport."""
    server = Kvd(transport)
    yield server
    server.kill()


@pytest.fixture
def own_kvd(transport):
    """A server for one test, which may kill or stop it."""
    server = Kvd(transport)
    yield server
    try:
        os.kill(server.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    server.kill()


@pytest.fixture
def client(kvd):
    with rdmx.Client(kvd.address, transport=kvd.transport) as c:
        c.wait_ready()
        yield c


_counter = [0]


@pytest.fixture
def key(request):
    """A key no other test uses (the module's server is shared)."""
    def make(name=""):
        _counter[0] += 1
        return "%s/%s/%d" % (request.node.name, name, _counter[0])
    return make
