"""One client shared by threads, the GIL released while waiting, and a
server that dies or stops."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import rdmx


def stop(pid):
    """SIGSTOP @pid and wait until the kernel says it is stopped (the
    signal is delivered asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.01)
    raise AssertionError("process %d did not stop" % pid)


def test_four_threads_share_a_client(client, key):
    nthreads, rounds, n, size = 4, 20, 8, 8 << 10
    buf = np.zeros(nthreads * n * size, dtype=np.uint8)
    client.register_buffer(buf)
    errors = []
    prefix = key()

    def work(t):
        try:
            base = t * n * size
            mine = buf[base:base + n * size]
            for r in range(rounds):
                keys = ["%s/%d/%d/%d" % (prefix, t, r, i) for i in range(n)]
                mine[:] = (t * 31 + r) % 251
                for i in range(n):
                    mine[i * size] = i  # each block its own first byte
                res = client.batch_put_from(keys, buf, [base + i * size for i in range(n)],
                                            [size] * n)
                assert res == [size] * n, res
                mine[:] = 0
                res = client.batch_get_into(keys, buf, [base + i * size for i in range(n)],
                                            [size] * n)
                assert res == [size] * n, res
                for i in range(n):
                    block = mine[i * size:(i + 1) * size]
                    assert block[0] == i
                    assert (block[1:] == (t * 31 + r) % 251).all()
                k = "%s/%d/single" % (prefix, t)
                client.put(k, b"%d:%d" % (t, r))
                assert client.get(k) == b"%d:%d" % (t, r)
                assert client.exists(k)
        except Exception as e:  # reported by the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
        assert not th.is_alive()
    assert errors == []
    client.unregister_buffer(buf)


def test_killed_server_raises_promptly(own_kvd, key):
    with rdmx.Client(own_kvd.address, transport=own_kvd.transport,
                     timeout_ms=5000) as c:
        k = key()
        buf = np.zeros(64 << 10, dtype=np.uint8)
        c.register_buffer(buf)
        c.put(k, b"v")
        assert c.get(k) == b"v"
        os.kill(own_kvd.pid, signal.SIGKILL)
        own_kvd.proc.wait()
        for op in (lambda: c.get(k),
                   lambda: c.batch_get_into([k, k], buf, [0, 4096], [4096, 4096]),
                   lambda: c.put(k, b"w")):
            start = time.monotonic()
            try:
                res = op()
            except rdmx.Error as e:
                assert isinstance(e, ConnectionError), repr(e)
            else:
                # the batch forms give a status per key
                assert all(r < 0 and r != rdmx.ERR_NOT_FOUND for r in res), res
            # well before the 5 s timeout
            assert time.monotonic() - start < 2.5


def test_gil_released_while_waiting(own_kvd, key):
    """A call waiting on a stopped server lets other threads run, and ends
    at its deadline."""
    with rdmx.Client(own_kvd.address, transport=own_kvd.transport,
                     timeout_ms=1500) as c:
        k = key()
        c.put(k, b"v")
        stop(own_kvd.pid)
        outcome = []

        def waiter():
            start = time.monotonic()
            try:
                c.get(k)
                outcome.append("returned")
            except rdmx.Error as e:
                outcome.append(e)
            outcome.append(time.monotonic() - start)

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.1)
        ticks, end = 0, time.monotonic() + 0.5
        while time.monotonic() < end:
            ticks += 1
        th.join(30)
        os.kill(own_kvd.pid, signal.SIGCONT)
        assert not th.is_alive()
        assert isinstance(outcome[0], (rdmx.TimeoutError, ConnectionError)), outcome
        assert outcome[1] < 10
        # the main thread ran meanwhile (a held GIL would give ~0 ticks)
        assert ticks > 10000


def test_close_while_other_threads_use_the_client(kvd, key):
    c = rdmx.Client(kvd.address, transport=kvd.transport)
    buf = bytearray(1 << 16)
    c.register_buffer(buf)
    seen = []

    def work():
        # (no stop flag: a call in flight when close() came ends normally,
        # and every thread's next call must refuse the closed client)
        k = key()
        while True:
            try:
                c.batch_get_into([k] * 4, buf, [0, 1024, 2048, 4096], [1024] * 4)
                c.put(k, b"x")
            except rdmx.Invalid:
                seen.append("closed")
                return

    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    c.close()
    for th in threads:
        th.join(30)
        assert not th.is_alive()
    assert seen == ["closed"] * 3
    buf.extend(b"x")  # the registration's export was released


def test_replicas_survive_a_killed_server(kvd, own_kvd, key):
    n, size = 16, 16 << 10
    keys = [key() for _ in range(n)]
    src = np.random.default_rng(5).integers(0, 256, n * size, dtype=np.uint8)
    dst = np.zeros_like(src)
    offsets, sizes = [i * size for i in range(n)], [size] * n
    with rdmx.Client([kvd.address, own_kvd.address], replicas=2,
                     transport=kvd.transport) as c:
        c.register_buffer(src)
        c.register_buffer(dst)
        assert c.batch_put_from(keys, src, offsets, sizes) == sizes
        os.kill(own_kvd.pid, signal.SIGKILL)
        own_kvd.proc.wait()
        # the first operation may still reach the dead server and learn
        # that it is down; from then on every read goes to the other copy
        first = c.batch_get_into(keys, dst, offsets, sizes)
        assert all(r == size or (r < 0 and r != rdmx.ERR_NOT_FOUND) for r in first)
        dst[:] = 0
        assert c.batch_get_into(keys, dst, offsets, sizes) == sizes
        assert np.array_equal(src, dst)


def test_threads_register_the_same_buffer_once(client):
    for _ in range(20):
        buf = bytearray(1 << 16)
        threads = [threading.Thread(target=client.register_buffer, args=(buf,))
                   for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        client.unregister_buffer(buf)
        buf.extend(b"x")  # no second registration kept an export
        with pytest.raises(rdmx.NotFound):
            client.unregister_buffer(buf)
