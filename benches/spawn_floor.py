#!/usr/bin/env python3
"""The floor under a burst of spawns: 200 posix_spawn calls of /bin/true from one thread.

Usage: python3 benches/spawn_floor.py
"""
import os, time
for trial in range(3):
    t0 = time.perf_counter(); pids = []
    for i in range(200):
        pids.append(os.posix_spawn("/bin/true", ["true"], {"PATH": "/bin"}))
    t1 = time.perf_counter()
    for p in pids: os.waitpid(p, 0)
    print("200 posix_spawn: %.1f ms (%.2f ms each)" % ((t1-t0)*1000, (t1-t0)*5))
