# py_workload.py - an allocation-heavy Python program for preload_python.sh.
#
# Run with and without libucma-preload.so (PYTHONHASHSEED fixed); the
# output must be the same.  Python serves small objects from its own
# arenas but everything larger than 512 bytes, every list and dict table
# that grows, big integers and long strings come from malloc and realloc.
#
# SPDX-License-Identifier: MIT
import hashlib
import json
import re
import sys


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def dicts(scale):
    d = {}
    for i in range(40000 * scale):
        d["k%d" % i] = [i, str(i) * (i % 7), {"n": i}]
    for i in range(0, 40000 * scale, 3):
        del d["k%d" % i]
    nested = {i: {j: str(i * j) for j in range(i % 50)} for i in range(2000)}
    return digest(sorted(d.items())[:500]) + " " + digest(nested) + " " + str(len(d))


def lists(scale):
    rows = [[j * i for j in range(i % 300)] for i in range(3000 * scale)]
    flat = [x for r in rows for x in r]
    flat.sort(key=lambda v: (v % 1009, v))
    grown = []
    for i in range(200000 * scale):
        grown.append(i)
    del grown[::2]
    return digest(flat[::997]) + " " + str(len(flat)) + " " + str(sum(grown))


def strings(scale):
    parts = []
    for i in range(30000 * scale):
        parts.append(("%05d-" % i) * (i % 40))
    text = "|".join(parts)
    words = re.findall(r"\d{5}", text)
    up = text.upper().replace("-", "+")
    b = bytearray()
    for i in range(5000):
        b += bytes([i % 256]) * (i % 300)
    return digest(words[::101]) + " " + str(len(up)) + " " + hashlib.sha256(b).hexdigest()[:16]


def big_ints(scale):
    f = 1
    for i in range(1, 3000 * scale):
        f *= i
    p = 3 ** 40000
    q = (p * f) // (f // 7 + 1)
    fib = [0, 1]
    for _ in range(5000):
        fib.append(fib[-1] + fib[-2])
    return hashlib.sha256(str(q % (10 ** 2000)).encode()).hexdigest()[:16] + " " + \
        str(f.bit_length()) + " " + str(fib[-1] % 1000000007)


def json_roundtrip(scale):
    doc = [{"id": i, "tags": ["t%d" % (i % 13)] * (i % 5), "v": i * 0.5}
           for i in range(20000 * scale)]
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    return digest(back[::1000]) + " " + str(len(text))


def main():
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    for fn in (dicts, lists, strings, big_ints, json_roundtrip):
        print(fn.__name__, fn(scale))


if __name__ == "__main__":
    main()
