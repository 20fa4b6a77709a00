"""Registered buffers and the zero-copy reads and writes: batches byte for
byte into numpy arrays and torch CPU tensors, misses, too-small slots, the
pointer forms, and the buffers' lifetime."""
import mmap

import numpy as np
import pytest
import torch

import rdmx

# Above the server's inline threshold (16 KiB): the server writes these
# straight into the registered slots; the small ones travel inline.
BIG, NBIG = 64 << 10, 16
SMALL, NSMALL = 1 << 10, 64


def random_blocks(n, size, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, size), dtype=np.uint8)


def store(client, keys, blocks):
    src = np.ascontiguousarray(blocks).reshape(-1)
    size = blocks.shape[1]
    client.register_buffer(src)
    try:
        res = client.batch_put_from(keys, src, [i * size for i in range(len(keys))],
                                    [size] * len(keys))
    finally:
        client.unregister_buffer(src)
    assert res == [size] * len(keys)


@pytest.mark.parametrize("size,n", [(BIG, NBIG), (SMALL, NSMALL)])
def test_batch_into_numpy(client, key, size, n):
    keys = [key() for _ in range(n)]
    blocks = random_blocks(n, size, seed=size)
    store(client, keys, blocks)
    dst = np.zeros(n * size, dtype=np.uint8)
    client.register_buffer(dst)
    # slots in reverse order, to see each lands where it is told
    offsets = [(n - 1 - i) * size for i in range(n)]
    assert client.batch_get_into(keys, dst, offsets, [size] * n) == [size] * n
    for i in range(n):
        assert np.array_equal(dst[offsets[i]:offsets[i] + size], blocks[i])
    client.unregister_buffer(dst)


def test_batch_into_torch(client, key):
    n, size = 8, BIG
    keys = [key() for _ in range(n)]
    blocks = random_blocks(n, size, seed=7)
    store(client, keys, blocks)
    t = torch.zeros((n, size), dtype=torch.uint8)
    client.register_buffer(t.numpy())
    res = client.batch_get_into(keys, t.numpy(), [i * size for i in range(n)], [size] * n)
    assert res == [size] * n
    assert torch.equal(t, torch.from_numpy(blocks))
    # a new .numpy() of the same tensor is the same memory
    client.unregister_buffer(t.numpy())
    with pytest.raises(rdmx.NotFound):
        client.unregister_buffer(t.numpy())


def test_batch_put_from_torch(client, key):
    n, size = 4, 8 << 10
    keys = [key() for _ in range(n)]
    t = torch.arange(n * size, dtype=torch.int64).to(torch.uint8).reshape(n, size)
    client.register_buffer(t.numpy())
    assert client.batch_put_from(keys, t.numpy(), [i * size for i in range(n)],
                                 [size] * n) == [size] * n
    for i in range(n):
        assert client.get(keys[i]) == t[i].numpy().tobytes()
    client.unregister_buffer(t.numpy())


def test_misses_and_too_small_slots(client, key):
    present, missing, large = key(), key(), key()
    client.put(present, b"p" * 100)
    client.put(large, b"L" * (16 << 10))
    dst = np.full(64 << 10, 0xEE, dtype=np.uint8)
    client.register_buffer(dst)
    res = client.batch_get_into([present, missing, large, present],
                                dst, [0, 1000, 2000, 40000], [100, 100, 8 << 10, 50])
    assert res == [100, rdmx.ERR_NOT_FOUND, rdmx.ERR_TOO_BIG, rdmx.ERR_TOO_BIG]
    assert bytes(dst[0:100]) == b"p" * 100
    # slots of misses and too-small values are left as they were
    assert (dst[100:] == 0xEE).all()
    assert client.get_into(missing, dst, 0) == rdmx.ERR_NOT_FOUND
    with pytest.raises(rdmx.TooBig) as e:
        client.get_into(large, dst[:1000])
    assert e.value.length == 16 << 10
    client.unregister_buffer(dst)


def test_get_into_put_from(client, key):
    k = key()
    buf = bytearray(32 << 10)
    client.register_buffer(buf)
    buf[100:100 + 10000] = bytes(range(100)) * 100
    client.put_from(k, buf, 100, 10000)
    out = bytearray(32 << 10)
    assert client.get_into(k, out, 5) == 10000  # unregistered: inline
    assert out[5:10005] == buf[100:10100]
    assert client.get_into(k, buf, 20000) == 10000
    assert buf[20000:30000] == buf[100:10100]
    client.put_from(k, memoryview(bytes(b"tail")))  # whole buffer, read-only
    assert client.get(k) == b"tail"
    with pytest.raises(rdmx.Error):
        client.put_from(k, buf, 40000)
    with pytest.raises(rdmx.Error):
        client.put_from(k, buf, 0, 40000)
    client.unregister_buffer(buf)


def test_unregistered_buffer_batches(client, key):
    keys = [key() for _ in range(4)]
    src = bytearray(b"".join(bytes([i]) * (8 << 10) for i in range(4)))
    assert client.batch_put_from(keys, src, [i * (8 << 10) for i in range(4)],
                                 [8 << 10] * 4) == [8 << 10] * 4
    dst = bytearray(len(src))
    assert client.batch_get_into(keys, dst, [i * (8 << 10) for i in range(4)],
                                 [8 << 10] * 4) == [8 << 10] * 4
    assert dst == src


def test_pointer_forms(client, key):
    n, size = 6, 16 << 10
    keys = [key() for _ in range(n)]
    blocks = random_blocks(n, size, seed=3)
    src = np.ascontiguousarray(blocks.reshape(-1))
    dst = np.zeros_like(src)
    client.register_buffer(src.ctypes.data, src.nbytes)
    client.register_buffer(dst.ctypes.data, dst.nbytes)
    ptrs = [src.ctypes.data + i * size for i in range(n)]
    assert client.batch_put_from(keys, ptrs, [size] * n) == [size] * n
    ptrs = [dst.ctypes.data + i * size for i in range(n)]
    assert client.batch_get_into(keys, ptrs, [size] * n) == [size] * n
    assert np.array_equal(src, dst)
    assert client.get_into(keys[0], dst.ctypes.data + size, size) == size
    assert np.array_equal(dst[size:2 * size], blocks[0])
    client.put_from(keys[1], src.ctypes.data, 10)
    assert client.get(keys[1]) == src[:10].tobytes()
    # memory outside every registered region is refused
    other = np.zeros(size, dtype=np.uint8)
    with pytest.raises(rdmx.Invalid):
        client.batch_get_into(keys[:1], [other.ctypes.data], [size])
    with pytest.raises(rdmx.Invalid):
        client.get_into(keys[0], dst.ctypes.data + dst.nbytes - 10, 100)
    client.unregister_buffer(src.ctypes.data)
    client.unregister_buffer(dst.ctypes.data)
    with pytest.raises(rdmx.Invalid):
        client.batch_get_into(keys[:1], [dst.ctypes.data], [size])


def test_batch_argument_checks(client, key):
    buf = bytearray(1024)
    with pytest.raises(rdmx.Invalid):
        client.batch_get_into([key(), key()], buf, [0], [10, 10])
    with pytest.raises(rdmx.Error):
        client.batch_get_into([key()], buf, [1000], [100])
    with pytest.raises(BufferError):
        client.batch_get_into([key()], b"read-only", [0], [1])
    with pytest.raises(BufferError):
        client.register_buffer(b"read-only")
    assert client.batch_get_into([], buf, [], []) == []
    with pytest.raises(TypeError):  # the sizes forgotten
        client.batch_get_into([key()], buf, [0])


def test_registered_buffer_cannot_be_resized_or_closed(client):
    buf = bytearray(4096)
    client.register_buffer(buf)
    client.register_buffer(buf)  # once is enough
    with pytest.raises(BufferError):
        buf.extend(b"x")
    client.unregister_buffer(buf)
    buf.extend(b"x")  # released
    with pytest.raises(rdmx.NotFound):
        client.unregister_buffer(buf)

    m = mmap.mmap(-1, 1 << 16)
    client.register_buffer(m)
    with pytest.raises(BufferError):
        m.close()
    client.unregister_buffer(m)
    m.close()

    arr = np.zeros(4096, dtype=np.uint8)
    client.register_buffer(arr)
    with pytest.raises(ValueError):
        arr.resize(8192)
    client.unregister_buffer(arr)
    arr.resize(8192)


def test_close_releases_buffers(kvd, key):
    buf = bytearray(8192)
    c = rdmx.Client(kvd.address, transport=kvd.transport)
    c.register_buffer(buf)
    c.put_from(key(), buf)
    c.close()
    buf.extend(b"x")  # no export is left
    with pytest.raises(rdmx.Invalid):
        c.register_buffer(bytearray(10))


def test_offsets_and_sizes_as_numpy_arrays(client, key):
    n, size = 32, 4096
    keys = [key() for _ in range(n)]
    blocks = random_blocks(n, size, seed=11)
    src = np.ascontiguousarray(blocks.reshape(-1))
    client.register_buffer(src)
    offsets = np.arange(n, dtype=np.int64) * size
    sizes = np.full(n, size, dtype=np.uint64)
    assert client.batch_put_from(keys, src, offsets, sizes) == [size] * n
    dst = np.zeros_like(src)
    client.register_buffer(dst)
    assert client.batch_get_into(keys, dst, offsets[::-1].copy(), sizes) == [size] * n
    assert np.array_equal(dst.reshape(n, size)[::-1], blocks)
    ptrs = np.arange(n, dtype=np.uint64) * size + dst.ctypes.data
    dst[:] = 0
    assert client.batch_get_into(keys, ptrs, sizes) == [size] * n
    assert np.array_equal(dst, src)
    with pytest.raises(OverflowError):
        client.batch_get_into(keys[:1], dst, np.array([-1]), np.array([1]))
    with pytest.raises(rdmx.Invalid):
        client.batch_get_into(keys, dst, offsets[:3], sizes)
    # other integer arrays go through the sequence path
    assert client.batch_get_into(keys[:2], dst, np.array([0, size], dtype=np.int32),
                                 [size, size]) == [size, size]
    client.unregister_buffer(src)
    client.unregister_buffer(dst)


def handler_bytes(channel, handler):
    """bytes_in and bytes_out of @handler in the server's rdmx.stats."""
    for line in channel.call("rdmx.stats").decode().splitlines():
        f = line.split()
        if f and f[0] == handler:
            return int(f[4]), int(f[5])
    raise AssertionError("no %s in rdmx.stats" % handler)


def test_registered_buffers_move_outside_the_messages(kvd, client, key):
    """A batch in registered memory is the C client's zero-copy batch: the
    server writes (GET) or reads (PUT) every slot itself, by one-sided
    access (over tcp carried by rdmx's own messages), so the values are not
    in the RPC messages. An unregistered buffer sends them inline, key by
    key."""
    n, size = 8, 64 << 10
    keys = [key() for _ in range(n)]
    buf = np.zeros(n * size, dtype=np.uint8)
    offsets, sizes = [i * size for i in range(n)], [size] * n
    with rdmx.Channel(kvd.address, transport=kvd.transport) as ch:
        in0, _ = handler_bytes(ch, "kv.put")
        client.batch_put_from(keys, bytearray(buf), offsets, sizes)  # not registered
        in1, _ = handler_bytes(ch, "kv.put")
        assert in1 - in0 >= n * size

        client.register_buffer(buf)
        b_in0, _ = handler_bytes(ch, "kv.batch_put")
        assert client.batch_put_from(keys, buf, offsets, sizes) == sizes
        in2, _ = handler_bytes(ch, "kv.put")
        b_in1, _ = handler_bytes(ch, "kv.batch_put")
        _, b_out0 = handler_bytes(ch, "kv.batch_get")
        assert client.batch_get_into(keys, buf, offsets, sizes) == sizes
        _, b_out1 = handler_bytes(ch, "kv.batch_get")
        client.unregister_buffer(buf)
        assert in2 == in1                     # not key by key
        assert 0 < b_in1 - b_in0 < n * 1024   # keys and slots, no values
        assert 0 < b_out1 - b_out0 < n * 1024
