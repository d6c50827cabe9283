#!/usr/bin/env python3
"""A small daemon's resident pages and where its CPU per fire goes: 10 tasks firing every
second on the local backend (`command = ["true"]`), one `zkcron run` per build.

Usage:  cargo build --release --locked --bin zkcron
        python3 benches/footprint.py [--seconds 20] [--pageout] [--no-http]
                                     [--print N] [--output-limit BYTES] [--runs R] [BINARY ...]

Per build: the CPU per fire of each thread (its `schedstat` nanoseconds over the window,
divided by the `started` events in it; threads by name), and `/proc/PID/smaps` at the end
summed per mapping (file and permissions) with its private dirty part. `--pageout` first asks
the kernel (`process_madvise(MADV_PAGEOUT)`, root) to page out the daemon's file-backed
read-only pages 2 s after its start, so the pages resident at the end are those the fires
touched again: the start-up-only part of the binary is the difference. `--no-http` runs the
daemon with `[http] listen = ""` (no /metrics, dashboard or API), to see what serving them
keeps resident. `--print N` makes each job print N lines (`seq N`) instead of nothing, and
`--output-limit` sets `[log] output_limit` (0: no output kept on disk; a binary that predates
the key is run without it), to measure what keeping a run's output costs per fire; `--runs R`
runs the binaries R times each, alternated run for run; `BINARY@LIMIT` runs a binary with
that output_limit (`BINARY@-`: without the key). Nothing outlives the
run: the daemon is stopped and its temp dir (zkcron-footprint-*) removed on every exit path.
"""
import argparse
import collections
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe import by_name_between, read_whole, thread_cpu_by_name  # noqa: E402
from reload import cpu_seconds, free_port, wait_log  # noqa: E402

SYS_PROCESS_MADVISE = 440  # x86_64
MADV_PAGEOUT = 21


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def page_out(pid):
    """Asks the kernel to page out every read-only file mapping of `pid`."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                p = line.split()
                if len(p) > 5 and p[1] in ("r-xp", "r--p"):
                    start, end = (int(x, 16) for x in p[0].split("-"))
                    span = IoVec(start, end - start)
                    libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(span), 1,
                                 MADV_PAGEOUT, 0)
    finally:
        os.close(pidfd)


def smaps(pid):
    """Resident and private dirty kB per (file, permissions)."""
    rss, dirty, key = collections.Counter(), collections.Counter(), None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            p = line.split()
            if not p[0].endswith(":"):
                key = (os.path.basename(p[5]) if len(p) > 5 else "[anon]", p[1])
            elif p[0] == "Rss:":
                rss[key] += int(p[1])
            elif p[0] == "Private_Dirty:":
                dirty[key] += int(p[1])
    return [(name, perms, kb, dirty[(name, perms)])
            for (name, perms), kb in rss.most_common() if kb]


def one_run(binary, seconds, pageout, http=True, lines=0, output_limit=None):
    read_whole(binary)
    tmp = tempfile.mkdtemp(prefix="zkcron-footprint-")
    jobs, log = os.path.join(tmp, "jobs.d"), os.path.join(tmp, "daemon.log")
    os.mkdir(jobs)
    for i in range(10):
        with open(os.path.join(jobs, f"t{i}.toml"), "w") as f:
            command = f'["seq", "{lines}"]' if lines else '["true"]'
            f.write(f'schedule = "* * * * * *"\ncommand = {command}\n')
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        listen = f"127.0.0.1:{free_port()}" if http else ""
        limit = "" if output_limit is None else f"output_limit = {output_limit}\n"
        f.write(f'[log]\nformat = "json"\n{limit}[http]\nlisten = "{listen}"\n')
    proc = subprocess.Popen(
        [binary, "run", "--config", config, "--jobs-dir", jobs, "--state-dir",
         os.path.join(tmp, "state"), "--node-id", "footprint"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)
    try:
        wait_log(log, "zkcron started", 1)
        time.sleep(2)
        if pageout:
            page_out(proc.pid)
        fires = lambda: open(log).read().count('"started"')  # noqa: E731
        before, cpu, fired = thread_cpu_by_name(proc.pid), cpu_seconds(proc.pid), fires()
        time.sleep(seconds)
        after = thread_cpu_by_name(proc.pid)
        cpu, fired = cpu_seconds(proc.pid) - cpu, fires() - fired
        per = collections.Counter(by_name_between(before, after))
        with open(f"/proc/{proc.pid}/status") as f:
            status = dict(line.split(":", 1) for line in f)
        return {
            "binary": binary, "load": round(os.getloadavg()[0], 2), "pageout": pageout,
            "http": http, "lines": lines, "output_limit": output_limit,
            "fires": fired, "cpu_us_per_fire": round(cpu * 1e6 / max(fired, 1)),
            "thread_us_per_fire": {k: round(v / 1000 / max(fired, 1), 1)
                                   for k, v in per.most_common()},
            "VmRSS": status["VmRSS"].strip(), "RssAnon": status["RssAnon"].strip(),
            "smaps_kb": smaps(proc.pid),
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pageout", action="store_true")
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--print", type=int, default=0, dest="lines")
    parser.add_argument("--output-limit", type=int, default=None)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("binaries", nargs="*",
                        default=[os.environ.get("ZKCRON_BIN", "target/release/zkcron")])
    args = parser.parse_args()
    for _ in range(args.runs):
        for binary in args.binaries:
            # BINARY@LIMIT runs that binary with that output_limit (BINARY@- without the key).
            path, _, limit = binary.partition("@")
            limit = args.output_limit if not limit else (None if limit == "-" else int(limit))
            print(json.dumps(one_run(os.path.abspath(path), args.seconds, args.pageout,
                                     not args.no_http, args.lines, limit)),
                  flush=True)


if __name__ == "__main__":
    main()
