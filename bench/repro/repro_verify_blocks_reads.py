#!/usr/bin/env python
"""Repro: verify() holds the store lock for its whole run, so reads of other subjects wait.

    PYTHONPATH=src python bench/repro/repro_verify_blocks_reads.py [size]

Builds a store (bench_erasure's 'unique' layout, default 10,100 records), forgets one
subject, waits for the compactor, then runs a reader thread (a read of a live key every
10 ms) while verify(handle) runs, and prints the reader's worst latency beside verify's
duration; then the same reader with no verify running, for comparison.
"""

import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import efface

from bench_erasure import PURPOSE, TENANT, Layout

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10100
lay = Layout(n, 1234)
path = os.path.join(tempfile.mkdtemp(), "s")
st = efface.open(path, embedder="hashing", background=False)
for s in range(0, n, 1000):
    slots = lay.order[s : s + 1000]
    st.write_many([lay.item(j) for j in slots], tenant=TENANT, purpose=PURPOSE, embeddings=lay.vectors(slots, []))
st.recall("warm up", tenant=TENANT, purpose=PURPOSE)
st.close()
st = efface.open(path, embedder="hashing", background=True)
live_key = lay.item(lay.subject_items("user-000001")[0])["key"]


def reader(stop, lat):
    while not stop.is_set():
        t = time.perf_counter()
        assert st.read(live_key, tenant=TENANT, purpose=PURPOSE) is not None
        lat.append(time.perf_counter() - t)
        time.sleep(0.01)


def run(with_verify):
    r = st.forget(tenant=TENANT, subject=lay.subj(f"user-{2 if with_verify else 3:06d}"))
    st.wait(r.handle, until="erased")
    time.sleep(1.0)
    stop, lat = threading.Event(), []
    th = threading.Thread(target=reader, args=(stop, lat))
    th.start()
    time.sleep(0.2)
    t = time.perf_counter()
    if with_verify:
        st.verify(r.handle)
    else:
        time.sleep(2.0)
    dur = time.perf_counter() - t
    time.sleep(0.2)
    stop.set()
    th.join()
    print(
        f"{'during verify' if with_verify else 'no verify    '}: {'verify' if with_verify else 'idle'} {dur:.2f} s; "
        f"reads {len(lat)}, worst read {max(lat) * 1000:.1f} ms, median {sorted(lat)[len(lat) // 2] * 1000:.2f} ms"
    )


run(True)
run(False)
st.close()
print("load average", os.getloadavg())
