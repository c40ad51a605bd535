"""What the largest records that ``write`` accepts cost to forget (issue #33): one record of
each text shape at 64 KiB, 256 KiB and 1 MiB (one hexadecimal word, a run of one character,
short words, characters of every Unicode plane), beside 200 ordinary records, forgotten,
waited on until erased and verified. Each size and shape runs in its own process, so its
peak RSS is its own. Prints one JSON document.

    python bench/bench_extremes.py [--sizes 65536,262144,1048576] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time

SHAPES = ("hex-word", "one-char-run", "short-words", "every-plane")


def text_of(shape: str, size: int) -> str:
    rng = random.Random(size)
    if shape == "hex-word":
        return "".join(rng.choice("0123456789abcdef") for _ in range(size))
    if shape == "one-char-run":
        return "a" * size
    out: list[str] = []
    n = 0
    if shape == "short-words":
        while n < size - 16:
            word = f"w{rng.getrandbits(40):x}"
            out.append(word)
            n += len(word) + 1
        return " ".join(out)
    while True:  # every plane with assigned characters, no NUL, surrogates or noncharacters
        cp = rng.choice([0, 1, 2, 3, 14, 15, 16]) * 0x10000 + rng.randrange(0x10000)
        if cp == 0 or 0xD800 <= cp < 0xE000 or cp & 0xFFFE == 0xFFFE:
            continue
        b = len(chr(cp).encode("utf-8"))
        if n + b > size:
            return "".join(out)
        out.append(chr(cp))
        n += b


def one(shape: str, size: int) -> dict:
    import efface

    text = text_of(shape, size)
    with tempfile.TemporaryDirectory() as d, efface.open(d, embedder="hashing") as store:
        for i in range(200):
            store.write(f"o{i}", f"another memory {i} about tea", tenant="t", subject="bob", purpose="p")
        t0 = time.perf_counter()
        store.write("big", text, tenant="t", subject="alice", purpose="p")
        write_s = time.perf_counter() - t0
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        receipt = store.forget(tenant="t", subject="alice")
        forget_s = time.perf_counter() - t0
        erased = store.wait(receipt.handle, 120).erased
        erased_s = time.perf_counter() - t0
        level = store.verify(receipt.handle).level
        verified_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "shape": shape,
        "bytes": len(text.encode("utf-8")),
        "write_s": round(write_s, 3),
        "forget_s": round(forget_s, 3),
        "ack_to_erased_s": round(erased_s, 3),
        "ack_to_verified_s": round(verified_s, 3),
        "erased": erased,
        "level": level,
        "peak_rss_before_forget_mib": before // 1024,
        "peak_rss_mib": peak // 1024,
    }


def _machine() -> str:
    """The processor's model name, cores and memory (Linux), as the other benches name them."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        with open("/proc/meminfo") as f:
            kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        return f"{model}, {os.cpu_count()} cores, {kib / (1 << 20):.1f} GiB"
    except (OSError, StopIteration):
        return f"{model}, {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="65536,262144,1048576")
    ap.add_argument("--out")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]))))
        return
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for shape in SHAPES:
            got = subprocess.run(
                [sys.executable, __file__, "--one", shape, str(size)], capture_output=True, text=True, check=True
            )
            rows.append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {
        "bench": "extremes",
        "argv": sys.argv[1:],
        "started_at": started,
        "commit": commit,
        "machine": _machine(),
        "load": os.getloadavg(),
        "rows": rows,
    }
    text = json.dumps(doc, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
