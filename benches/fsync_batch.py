#!/usr/bin/env python3
"""Why the local backend journals: 200 atomic file writes (write, fsync, rename, dir fsync)
in parallel, one serially, and one journal append of 200 records with one fdatasync.

Usage: python3 benches/fsync_batch.py   (writes into $TMPDIR, default /tmp)
"""
import os, tempfile, time, threading, statistics
d = tempfile.mkdtemp()
def atomic(i):
    p = os.path.join(d, f"t{i}.json"); tmp = p + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b'{"format":1,"last_claimed":"2026-01-01T00:00:00Z"}'); f.flush(); os.fsync(f.fileno())
    os.rename(tmp, p)
    fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
for trial in range(3):
    t0 = time.perf_counter()
    ths = [threading.Thread(target=atomic, args=(i,)) for i in range(200)]
    [t.start() for t in ths]; [t.join() for t in ths]
    print("200 atomic file writes, parallel: %.1f ms" % ((time.perf_counter()-t0)*1000))
t0 = time.perf_counter()
for i in range(50): atomic(i)
print("one atomic write, serial avg: %.2f ms" % ((time.perf_counter()-t0)*1000/50))
j = open(os.path.join(d, "journal"), "ab")
t0 = time.perf_counter()
for i in range(50):
    j.write(b"x" * 40 * 200); j.flush(); os.fdatasync(j.fileno())
print("journal append of 200 records + fdatasync: %.2f ms" % ((time.perf_counter()-t0)*1000/50))
