"""Hidden cases for indexfile-lookup: the hash, the positions, and lookups in index files written by
the broker's own IndexFile (few slots: long chains, collisions)."""
from __future__ import annotations

import os
import random
import tempfile

from labs.exercises.kit import expect
from rmq.store.index import INDEX_HEADER_SIZE, IndexFile, build_key, index_key_hash

KEYS = ["order-1", "TopicA#order-42", "hello", "polygenelubricants", "Aa", "BB", "中文键", "x" * 40,
        "TopicTest#KEY-2047", "negative-hash-example"]


def offline(sol):
    for k in KEYS:
        yield f"key_hash({k!r})", lambda k=k: expect(sol.key_hash(k), index_key_hash(k),
                                                     "Java String.hashCode: h = 31*h + ord(c), wrapped to int32; "
                                                     "then abs, with -2**31 -> 0")
    for h, n in [(0, 8), (123456789, 500), (2**31 - 1, 5_000_000), (77, 1)]:
        yield f"slot_position({h}, {n})", lambda h=h, n=n: expect(sol.slot_position(h, n), INDEX_HEADER_SIZE + (h % n) * 4)
    for n, i in [(8, 1), (500, 37), (5_000_000, 20_000_000)]:
        yield f"item_position({n}, {i})", lambda n=n, i=i: expect(sol.item_position(n, i), INDEX_HEADER_SIZE + n * 4 + i * 20)
    rnd = random.Random(11)
    for slots, count in [(8, 60), (3, 200), (97, 400)]:
        with tempfile.TemporaryDirectory() as tmp:
            f = IndexFile(os.path.join(tmp, "idx"), slots, count + 8)
            keys = [f"k{rnd.randrange(25)}" for _ in range(count)]
            for i, k in enumerate(keys):
                f.put_key(build_key("Orders", k), 1000 + i * 137, 1_700_000_000_000 + i)
            f.flush()
            data = bytes(f.mm)
            want = {}
            for k in sorted(set(keys)) + ["never-put"]:
                out: list[int] = []
                f.select_phy_offsets(out, build_key("Orders", k), 10_000, 0, 2**62)
                want[k] = out
            f.close()
        for k in ["k0", "k7", "k13", "never-put"]:
            yield (f"find in a file of {slots} slots and {count} items: key {k!r}",
                   lambda data=data, slots=slots, k=k, w=want.get(k, []): expect(
                       sol.find(data, slots, "Orders", k), w,
                       "walk slot -> item -> prevIndex until 0, keep items whose keyHash matches, newest first"))
        yield (f"find in a file of {slots} slots: another topic's key is not returned",
               lambda data=data, slots=slots: expect(sol.find(data, slots, "Payments", "k0"), []))
