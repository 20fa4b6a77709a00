#!/usr/bin/python3
"""kv_cache_offload.py — offload an LLM's KV cache to rdmx-kvd, as a
KV-cache connector of an inference engine does.

The engine's KV cache is one buffer of fixed-size chunks (here a numpy
array standing in for the paged CPU cache; a torch CPU tensor's .numpy()
works the same). It is registered once, so every chunk moves zero-copy
between the buffer and the servers. A prompt's tokens are cut into chunks
of CHUNK_TOKENS; chunk i is stored under a chained hash — the hash of
chunk i-1's key and chunk i's tokens — so a key names the whole prefix up
to its chunk, and two prompts share the keys of their common prefix only.

For each request: prefix_hits() says how many leading chunks the servers
hold; batch_get_into() loads them into free slots of the buffer; the rest
are "computed" (filled from their key, standing in for the model's
attention layers) and stored with batch_put_from(). Every loaded chunk is
checked against what was stored.

    rdmx-kvd --listen 127.0.0.1:11311 &
    PYTHONPATH=build/python examples/kv_cache_offload.py --servers 127.0.0.1:11311
    PYTHONPATH=build/python examples/kv_cache_offload.py --chunk-bytes 4096 --slots 16   # small
"""
import argparse
import hashlib
import sys

import numpy as np

import rdmx


def chunk_keys(tokens, chunk_tokens, model="demo-model"):
    """Chained-hash keys of the full chunks of @tokens."""
    keys, prev = [], hashlib.sha256(model.encode()).digest()
    for start in range(0, len(tokens) - chunk_tokens + 1, chunk_tokens):
        chunk = np.asarray(tokens[start:start + chunk_tokens], dtype=np.int32)
        prev = hashlib.sha256(prev + chunk.tobytes()).digest()
        keys.append("kv/" + prev.hex()[:40])
    return keys


def compute_chunk(key, out):
    """Stand-in for the model: the chunk's bytes follow from its key."""
    seed = int(key[3:19], 16)
    out[:] = np.random.default_rng(seed).integers(0, 256, out.size, dtype=np.uint8)


class Connector:
    """Loads and stores chunks of one registered KV-cache buffer."""

    def __init__(self, client, slots, chunk_bytes):
        self.client = client
        self.chunk_bytes = chunk_bytes
        self.cache = np.zeros(slots * chunk_bytes, dtype=np.uint8)
        client.register_buffer(self.cache)  # once, for every transfer
        self.free = list(range(slots))

    def slot(self, i):
        return self.cache[i * self.chunk_bytes:(i + 1) * self.chunk_bytes]

    def run_request(self, tokens, chunk_tokens):
        keys = chunk_keys(tokens, chunk_tokens)
        if len(keys) > len(self.free):
            raise RuntimeError("more chunks than free slots")
        slots = [self.free.pop() for _ in keys]
        offsets = [s * self.chunk_bytes for s in slots]
        sizes = [self.chunk_bytes] * len(keys)

        hits = self.client.prefix_hits(keys)
        loaded = self.client.batch_get_into(keys[:hits], self.cache,
                                            offsets[:hits], sizes[:hits])
        expect = np.empty(self.chunk_bytes, dtype=np.uint8)
        for key, slot, n in zip(keys, slots, loaded):
            if n != self.chunk_bytes:  # evicted meanwhile: compute it again
                raise RuntimeError("chunk %s: %s" % (key, rdmx.status_name(n)))
            compute_chunk(key, expect)
            if not np.array_equal(self.slot(slot), expect):
                raise RuntimeError("chunk %s came back different" % key)

        for key, slot in zip(keys[hits:], slots[hits:]):
            compute_chunk(key, self.slot(slot))
        stored = self.client.batch_put_from(keys[hits:], self.cache,
                                            offsets[hits:], sizes[hits:])
        failed = [rdmx.status_name(s) for s in stored if s < 0]
        self.free.extend(slots)  # the request is done with its slots
        return len(keys), hits, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="127.0.0.1:11311")
    ap.add_argument("--transport", default=None, help="auto, shm, tcp or rdma")
    ap.add_argument("--chunk-tokens", type=int, default=256)
    ap.add_argument("--chunk-bytes", type=int, default=256 << 10,
                    help="bytes of KV cache per chunk (all layers)")
    ap.add_argument("--slots", type=int, default=64, help="chunks the buffer holds")
    args = ap.parse_args()

    rng = np.random.default_rng(1)
    system = rng.integers(0, 32000, 4 * args.chunk_tokens).tolist()
    requests = [
        ("first prompt", system + rng.integers(0, 32000, 3 * args.chunk_tokens).tolist()),
        ("same system prompt, new question",
         system + rng.integers(0, 32000, 2 * args.chunk_tokens).tolist()),
    ]
    requests.append(("the first prompt again", requests[0][1]))

    with rdmx.Client(args.servers, transport=args.transport) as client:
        conn = Connector(client, args.slots, args.chunk_bytes)
        for name, tokens in requests:
            chunks, hits, failed = conn.run_request(tokens, args.chunk_tokens)
            print("%-34s %2d chunks: %2d loaded, %2d computed and stored%s" %
                  (name, chunks, hits, chunks - hits,
                   (", store failed: %s" % failed) if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
