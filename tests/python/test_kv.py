"""rdmx.Client's single-key and server-side operations, errors, and
rdmx.Channel."""
import pytest

import rdmx


def test_put_get_miss(client, key):
    k = key()
    assert client.get(k) is None
    client.put(k, b"hello")
    assert client.get(k) == b"hello"
    client.put(k, "text \u00e9")
    assert client.get(k) == "text \u00e9".encode()
    client.put(k, bytearray(b"\x00\x01\x02"))
    assert client.get(k) == b"\x00\x01\x02"
    client.put(k, b"")
    assert client.get(k) == b""


def test_str_and_bytes_keys_are_the_same_key(client, key):
    k = key()
    client.put(k, b"v")
    assert client.get(k.encode()) == b"v"
    assert client.exists(k.encode())


def test_large_value_through_get(client, key):
    k = key()
    value = bytes(range(256)) * 1024  # 256 KiB: more than get()'s first guess
    client.put(k, value)
    assert client.get(k) == value


def test_delete_exists(client, key):
    k = key()
    assert not client.exists(k)
    assert client.delete(k) is False
    client.put(k, b"x")
    assert client.exists(k)
    assert client.delete(k) is True
    assert not client.exists(k)
    assert client.get(k) is None


def test_incr(client, key):
    k = key()
    with pytest.raises(rdmx.NotFound):
        client.incr(k, 1)
    client.put(k, b"10")
    assert client.incr(k, 5) == 15
    assert client.incr(k, -3) == 12
    assert client.incr(k, -100) == 0
    assert client.get(k) == b"0"


def test_ttl(client, key):
    import time
    k = key()
    client.put(k, b"short", ttl_ms=200)
    assert client.get(k) == b"short"
    time.sleep(0.6)
    assert client.get(k) is None


def test_stats(client):
    s = client.stats()
    assert isinstance(s, dict)
    assert isinstance(s["pid"], int)
    assert s["curr_connections"] >= 1
    assert client.stats(server=0)["pid"] == s["pid"]
    with pytest.raises(rdmx.Error):
        client.stats(server=5)


def test_eval(client, key):
    k = key()
    client.put(k, b"41")
    out = client.eval("local v = kv.get(KEYS[1]); return tostring(tonumber(v) + tonumber(ARGV[1]))",
                      keys=[k], args=["1"])
    assert out == b"42"
    assert client.eval("return 'x'") == b"x"
    with pytest.raises(rdmx.Invalid) as e:
        client.eval("this is not lua")
    assert e.value.status == rdmx.ERR_INVALID
    assert e.value.name == "RDMX_ERR_INVALID"
    assert e.value.detail


def test_prefix_hits_and_batch_is_exist(client, key):
    keys = [key() for _ in range(6)]
    for k in keys[:3] + keys[4:5]:
        client.put(k, b"v" * 10)
    client.put(keys[5], b"")  # an empty value is present too
    assert client.prefix_hits(keys) == 3
    assert client.prefix_hits([]) == 0
    assert client.batch_is_exist(keys) == [True, True, True, False, True, True]
    assert client.batch_is_exist([]) == []


def test_key_types(client):
    with pytest.raises(TypeError):
        client.get(42)
    with pytest.raises(TypeError):
        client.batch_is_exist([b"a", 3])
    with pytest.raises(TypeError):  # one key, not a list of them
        client.prefix_hits("abc")
    with pytest.raises(rdmx.Invalid):
        client.get("")
    with pytest.raises(rdmx.TooBig):  # over the server's --max-key
        client.put("k" * 1000, b"v")


def test_value_over_server_limit(client, key):
    with pytest.raises(rdmx.TooBig) as e:
        client.put(key(), bytes(2 << 20))
    assert e.value.status == rdmx.ERR_TOO_BIG
    assert isinstance(e.value, rdmx.Error)


def test_error_classes():
    assert issubclass(rdmx.TimeoutError, rdmx.Error)
    assert issubclass(rdmx.TimeoutError, TimeoutError)
    assert issubclass(rdmx.ConnectionReset, ConnectionError)
    assert issubclass(rdmx.Unreachable, ConnectionError)
    assert issubclass(rdmx.Invalid, ValueError)
    assert issubclass(rdmx.TooBig, rdmx.Error)
    assert rdmx.status_name(rdmx.ERR_NOT_FOUND) == "RDMX_ERR_NOT_FOUND"
    assert rdmx.OK == 0 and rdmx.ERR_NOT_FOUND == -6
    assert isinstance(rdmx.version(), str)


def test_closed_client(kvd):
    c = rdmx.Client(kvd.address, transport=kvd.transport)
    c.close()
    c.close()
    with pytest.raises(rdmx.Invalid):
        c.get("k")
    with pytest.raises(rdmx.Invalid):
        with c:
            pass


def test_bad_arguments(kvd):
    with pytest.raises(rdmx.Invalid):
        rdmx.Client(kvd.address, transport="carrier-pigeon")
    with pytest.raises(rdmx.Error):
        rdmx.Client("not an address")


def test_server_list(kvd, key):
    with rdmx.Client([kvd.address, kvd.address], transport=kvd.transport) as c:
        assert c.servers() == 2
        k = key()
        c.put(k, b"v")
        assert c.get(k) == b"v"


def test_unreachable_server(kvd):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with rdmx.Client("127.0.0.1:%d" % port, transport=kvd.transport,
                     timeout_ms=2000) as c:
        with pytest.raises(rdmx.Error) as e:
            c.get("k")
        assert isinstance(e.value, ConnectionError) or isinstance(e.value, TimeoutError)


def test_channel_call(kvd):
    with rdmx.Channel(kvd.address, transport=kvd.transport) as ch:
        ch.wait_ready()
        assert isinstance(ch.call("rdmx.ping"), bytes)
        assert isinstance(ch.call("rdmx.stats", b"", timeout_ms=2000), bytes)
        with pytest.raises(rdmx.NotFound) as e:
            ch.call("no.such.method", b"payload")
        assert e.value.name == "RDMX_ERR_NOT_FOUND"
    with pytest.raises(rdmx.Invalid):
        ch.call("rdmx.ping")
