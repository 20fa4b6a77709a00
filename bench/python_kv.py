#!/usr/bin/python3
"""python_kv.py — the Python module's batch_get_into next to the same
batches through the C client (bench/kv_batch_get.c), one run each.

    bench/python_kv.py                      64 x 256 KiB and 1024 x 4 KiB
                                            batches, and single-key get_into
                                            latency of 4 KiB, over shm
    bench/python_kv.py --transport tcp
    bench/python_kv.py --cells 4x16k,16x4k --single 4k --rounds 3   (a smoke run)
    bench/python_kv.py --servers 127.0.0.1:11311                    (a running server)

Needs make first (build/python, build/bin/rdmx-kvd, build/lib/librdmx.a).
Starts rdmx-kvd on a free loopback port (unless --servers) with
RDMX_TRANSPORT set to the transport, and compiles kv_batch_get.c with $CC
(default cc) into a temporary directory; stops the server (by its PID) and
removes the directory at exit.

Per cell COUNTxSIZE: the Python side registers one numpy array of COUNT x
SIZE bytes, stores COUNT values under "bench/COUNTxSIZE/I" (not timed),
then times ROUNDS + 1 calls of batch_get_into (each key into its slot; the
first call not counted); kv_batch_get does the same with rdmx_kv_get_nb
requests in flight on a registered malloc'd buffer. With --single SIZE,
ROUNDS + 1 single-key reads into a registered buffer: get_into against
rdmx_kv_get. Prints each side's median and minimum time per call, the
throughput, and py/c, C's median time over Python's (Python's throughput
over C's). The targets: py/c >= 0.9 for the batches; for the single-key
latency over shm, Python at most 1.5 x C's, i.e. py/c >= 0.67.
"""
import argparse
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("RDMX_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import numpy as np  # noqa: E402

import rdmx  # noqa: E402


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", text)
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % text)
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def parse_cells(text):
    cells = []
    for cell in text.split(","):
        count, _, size = cell.partition("x")
        cells.append((int(count), parse_size(size)))
    return cells


def start_kvd(transport, memory):
    env = dict(os.environ, RDMX_TRANSPORT=transport, UCX_NET_DEVICES="lo")
    proc = subprocess.Popen(
        [os.path.join(BUILD, "bin", "rdmx-kvd"), "--listen", "127.0.0.1:0",
         "--memory", memory],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if not line:
                break
            if b"listening on " in line:
                return proc, line.split(b"listening on ")[1].split()[0].decode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    sys.exit("python_kv: rdmx-kvd did not start")


def compile_helper(work):
    exe = os.path.join(work, "kv_batch_get")
    lib = os.path.join(BUILD, "lib")
    cmd = [os.environ.get("CC", "cc"), "-O2", "-I", os.path.join(ROOT, "include"),
           "-I", os.path.join(BUILD, "include"), "-o", exe,
           os.path.join(ROOT, "bench", "kv_batch_get.c"),
           "-L", lib, "-Wl,-rpath," + lib, "-lrdmx"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("python_kv: compiling kv_batch_get.c failed:\n" + res.stderr)
    return exe


def run_c(exe, servers, transport, count, size, rounds, single):
    env = dict(os.environ, RDMX_TRANSPORT=transport, UCX_NET_DEVICES="lo")
    cmd = [exe, servers, str(count), str(size), str(rounds)] + (["--single"] if single else [])
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if res.returncode != 0:
        sys.exit("python_kv: kv_batch_get failed:\n" + res.stdout + res.stderr)
    fields = dict(f.split("=") for f in res.stdout.split()[1:])
    return float(fields["median_us"]), float(fields["min_us"])


def run_python(client, count, size, rounds, single):
    buf = np.full(count * size, 0x5A, dtype=np.uint8)
    client.register_buffer(buf)
    keys = ["bench/%dx%d/%d" % (count, size, i) for i in range(count)]
    offsets = [i * size for i in range(count)]
    sizes = [size] * count
    res = client.batch_put_from(keys, buf, offsets, sizes)
    if res != sizes:
        sys.exit("python_kv: batch_put_from: %r" % res[:8])
    times = []
    for _ in range(rounds + 1):
        if single:
            t0 = time.perf_counter()
            n = client.get_into(keys[0], buf, 0)
            times.append(time.perf_counter() - t0)
            ok = n == size
        else:
            t0 = time.perf_counter()
            res = client.batch_get_into(keys, buf, offsets, sizes)
            times.append(time.perf_counter() - t0)
            ok = res == sizes
        if not ok:
            sys.exit("python_kv: a read failed or came short")
    client.unregister_buffer(buf)
    times = sorted(times[1:])  # the first warms up
    return times[len(times) // 2] * 1e6, times[0] * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--cells", type=parse_cells, default=parse_cells("64x256k,1024x4k"),
                    help="batches COUNTxSIZE,... (default 64x256k,1024x4k)")
    ap.add_argument("--single", type=parse_size, default=parse_size("4k"),
                    help="value size of the single-key latency cell (0: none)")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--servers", help="use these servers instead of starting one")
    ap.add_argument("--memory", default="256m", help="the started server's --memory")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="rdmx-python-kv.")
    kvd = None
    try:
        exe = compile_helper(work)
        servers = args.servers
        if servers is None:
            kvd, servers = start_kvd(args.transport, args.memory)
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
        print("# python_kv: servers %s, transport %s, rounds %d, load %s" %
              (servers, args.transport, args.rounds, os.getloadavg()))
        cells = [(c, s, False) for c, s in args.cells]
        if args.single:
            cells.append((1, args.single, True))
        print("%-16s %12s %12s %10s %12s %12s %10s %8s" %
              ("cell", "py_med_us", "py_min_us", "py_GB/s",
               "c_med_us", "c_min_us", "c_GB/s", "py/c"))
        with rdmx.Client(servers, transport=args.transport) as client:
            client.wait_ready()
            for count, size, single in cells:
                py_med, py_min = run_python(client, count, size, args.rounds, single)
                c_med, c_min = run_c(exe, servers, args.transport, count, size,
                                     args.rounds, single)
                nbytes = count * size
                name = ("get_into %dB" % size) if single else ("%dx%dB" % (count, size))
                print("%-16s %12.1f %12.1f %10.3f %12.1f %12.1f %10.3f %8.3f" %
                      (name, py_med, py_min, nbytes / py_med / 1e3,
                       c_med, c_min, nbytes / c_med / 1e3, c_med / py_med))
        print("# py/c: Python's throughput over C's (median per call); load %s" %
              (os.getloadavg(),))
    finally:
        if kvd is not None:
            os.kill(kvd.pid, signal.SIGKILL)
            kvd.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
