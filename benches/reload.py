#!/usr/bin/env python3
"""100,000 task files on one host: start-up, RSS, `zkcron status --json` and reloads, with the
daemon's own CPU seconds beside each wall-clock figure (comparable on a busy machine, where the
wall clock is not), for one or more builds alternated run for run.

Usage:  cargo build --release --locked --bin zkcron
        python3 benches/reload.py [--files 100000] [--runs 3] [BINARY ...]

BINARY defaults to ZKCRON_BIN or target/release/zkcron; with several, each run starts every
binary in turn on the same jobs dir (written once: N idle files, 3,600 distinct expressions,
none due during the run). Per run and binary: exec to `zkcron started` (wall, and the daemon's
CPU then); RSS at that line and 5 s later; `zkcron status --json` end to end (and the daemon's
CPU for it); a SIGHUP reload with nothing changed; a reload after one file changed (timed from
the write, so it includes the watch's 300 ms of quiet); RSS after those and after three more
SIGHUPs. Each figure's median over the runs is printed last, per binary, with the load average.
Nothing outlives the run: the temp dir (zkcron-reload-*) is removed and every daemon stopped on
every exit path.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_BIN = os.environ.get("ZKCRON_BIN", "target/release/zkcron")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_log(log, needle, count, timeout=300):
    """The monotonic time at which `log` holds `count` lines with `needle`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log) as f:
            if f.read().count(needle) >= count:
                return time.monotonic()
        time.sleep(0.01)
    sys.exit(f"reload.py: no {count}x {needle!r} in {log} within {timeout} s")


def write_jobs(jobs, files):
    hour = (time.gmtime().tm_hour + 12) % 24
    os.mkdir(jobs, 0o755)
    for i in range(files):
        with open(os.path.join(jobs, f"idle-{i:06d}.toml"), "w") as f:
            f.write(f'schedule = "{i % 60} {i // 60 % 60} {hour} * * *"\n'
                    'command = ["true"]\ncatch_up = "skip"\n')


def one_run(binary, tmp, files):
    jobs, state, log = (os.path.join(tmp, n) for n in ("jobs.d", "state", "daemon.log"))
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write(f'[log]\nformat = "json"\n[http]\nlisten = "127.0.0.1:{free_port()}"\n')
    shutil.rmtree(state, ignore_errors=True)
    changed = os.path.join(jobs, "idle-000000.toml")
    with open(changed) as f:
        original = f.read()
    r = {"binary": binary, "load": round(os.getloadavg()[0], 2)}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [binary, "run", "--config", config, "--jobs-dir", jobs, "--state-dir", state,
         "--node-id", "bench"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(log, "w"), env=dict(os.environ, ZKCRON_LOG="info"), start_new_session=True)
    try:
        r["start_s"] = round(wait_log(log, "zkcron started", 1) - t0, 2)
        r["start_cpu_s"] = cpu_seconds(proc.pid)
        r["rss_started_mib"] = rss_mib(proc.pid)
        time.sleep(5)
        r["rss_5s_mib"] = rss_mib(proc.pid)
        c, t = cpu_seconds(proc.pid), time.monotonic()
        status = subprocess.run([binary, "status", "--json", "--config", config,
                                 "--state-dir", state], capture_output=True, timeout=120)
        r["status_json_s"] = round(time.monotonic() - t, 2)
        r["status_cpu_s"] = round(cpu_seconds(proc.pid) - c, 2)
        if status.returncode != 0 or len(json.loads(status.stdout)["tasks"]) != files:
            sys.exit(f"reload.py: `zkcron status --json` failed: {status.stderr[-500:]}")
        c, t = cpu_seconds(proc.pid), time.monotonic()
        proc.send_signal(signal.SIGHUP)
        r["sighup_s"] = round(wait_log(log, "tasks reloaded", 2) - t, 2)
        r["sighup_cpu_s"] = round(cpu_seconds(proc.pid) - c, 2)
        time.sleep(1)
        c = cpu_seconds(proc.pid)
        with open(changed, "a") as f:
            f.write('description = "changed"\n')
        t = time.monotonic()
        r["one_file_s"] = round(wait_log(log, "tasks reloaded", 3) - t, 2)
        r["one_file_cpu_s"] = round(cpu_seconds(proc.pid) - c, 2)
        time.sleep(1)
        r["rss_after_2_reloads_mib"] = rss_mib(proc.pid)
        for i in range(3):
            proc.send_signal(signal.SIGHUP)
            wait_log(log, "tasks reloaded", 4 + i)
            time.sleep(0.5)
        r["rss_after_5_reloads_mib"] = rss_mib(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with open(changed, "w") as f:
            f.write(original)
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("binaries", nargs="*", default=[DEFAULT_BIN])
    args = parser.parse_args()
    binaries = [os.path.abspath(b) for b in args.binaries]
    tmp = tempfile.mkdtemp(prefix="zkcron-reload-")
    results = {b: [] for b in binaries}
    try:
        write_jobs(os.path.join(tmp, "jobs.d"), args.files)
        for _ in range(args.runs):
            for binary in binaries:
                r = one_run(binary, tmp, args.files)
                results[binary].append(r)
                print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for binary, runs in results.items():
        medians = {k: statistics.median(r[k] for r in runs)
                   for k in runs[0] if k != "binary"}
        print(json.dumps({"binary": binary, "runs": len(runs), "median": medians}), flush=True)


if __name__ == "__main__":
    main()
