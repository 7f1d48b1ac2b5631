# lend_workload.py - an unmodified allocation-heavy program for heap
# lending (preload_lend.sh): with PYTHONMALLOC=malloc every object comes
# from malloc, so the heap grows onto frames the CMA area lends it, while
# large bytearrays (contiguous buffers under UCMA_PRELOAD_CONTIG_MIN) make
# the library take those frames back under the program's feet.  Every
# structure is checked against what was written, and a digest of all of
# it is printed: a lost or torn write during a take-back changes it.
#
# SPDX-License-Identifier: MIT
import hashlib
import threading

digest = hashlib.sha256()
kept = []


def check(d, r):
    for i in range(0, len(d), 97):
        if d[i] != "v%d.%d" % (i, r) * 3:
            raise SystemExit("round %d: entry %d changed" % (r, i))


def writer(out, seed):
    # A second thread writes the heap while the first takes frames back.
    acc = []
    for k in range(30000):
        acc.append((seed * 31 + k) % 1000003)
        if len(acc) > 4000:
            out.append(sum(acc))
            acc = acc[2000:]
    out.append(sum(acc))


for r in range(24):
    d = {i: "v%d.%d" % (i, r) * 3 for i in range(30000)}
    res = []
    t = threading.Thread(target=writer, args=(res, r))
    t.start()
    bufs = [bytearray([(r + j) & 0xff]) * (1 << 20) for j in range(6)]
    t.join()
    check(d, r)
    for j, b in enumerate(bufs):
        if b.count((r + j) & 0xff) != len(b):
            raise SystemExit("round %d: buffer %d changed" % (r, j))
        digest.update(bytes(b[:4096]))
    digest.update(repr(res).encode())
    digest.update(repr(sorted(d.items())[:500]).encode())
    kept.append(d)
    if len(kept) > 6:
        old = kept.pop(0)
        digest.update(str(len(old)).encode())

for r, d in enumerate(kept):
    digest.update(repr(list(d.values())[-100:]).encode())
print("rounds 24 kept", len(kept), "digest", digest.hexdigest())
