#!/usr/bin/env python3
"""Cost per fire and same-instant bursts, seen from outside.

Usage:  cargo build --release --locked && cargo build --release --locked --example probe
        python3 benches/probe.py [--seconds 60] [--tasks 10] [--runs 1] [--floor] [--compare]
        (--compare: also `cargo build --release --locked --manifest-path benches/peer/Cargo.toml`)

The release daemon (embedded backend, default logging) loads `tasks` task files that all fire
every second, at the same instant, running `examples/probe`: a job that reads the wall clock
first thing and appends `<task> <ZKCRON_SCHEDULED_AT> <start ns>` to a file. So
  lateness = the probe's own start time - the tick's instant,
measured by the job, not by the daemon's log: timer, claim (a group-committed fdatasync of the
journal on this machine's disk), spawn and the exec of a small binary. The first 3 s are left
out (start-up); p50/p99/max are over every fire, and "last_of_instant" over the latest probe of
each instant (when the whole burst has started).
CPU per fire: the CPU time the daemon's threads ran over the measured seconds (the first field
of /proc/<pid>/task/<tid>/schedstat, in nanoseconds: utime + stime in /proc/<pid>/stat count
10 ms ticks, ~10 % of a 30-s window at 10 fires a second), divided by the fires seen; also as %
of one core (at `tasks` fires per second). A thread that ends within the window loses its part
of it (the daemons keep theirs; tokio's idle blocking threads may end, having run nothing).
--floor: the same burst started by this script with posix_spawn from one thread at each second
(no timer slack, claim or logging): the machine's floor under `tasks` spawns + execs.
--compare: each run is a pair, zkcron then the peer (benches/peer: tokio-cron-scheduler running
the same probe jobs every second, ZKCRON_SCHEDULED_AT = the wall second it ran for), measured
the same way, alternately in one invocation so both see the same machine load.
Prints one JSON object per run; docs/BENCHMARKS.md records the figures.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("ZKCRON_BIN", os.path.join(ROOT, "target", "release", "zkcron"))
PROBE = os.environ.get("ZKCRON_PROBE",
                       os.path.join(ROOT, "target", "release", "examples", "probe"))
PEER = os.environ.get("ZKCRON_PEER",
                      os.path.join(ROOT, "benches", "peer", "target", "release", "zkcron-peer"))
WARMUP_S = 3


def thread_cpu_ns(pid):
    """The CPU time each thread of `pid` has run, in ns, by thread id."""
    ran = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran[tid] = int(f.read().split()[0])
        except OSError:
            pass  # ended meanwhile
    return ran


def cpu_seconds_between(before, after):
    """The CPU time run between two `thread_cpu_ns` readings: threads in both, and all of
    those started between them."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(values):
    return {"p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2),
            "max": round(max(values), 2)} if values else None


def read_probes(path, since_ns):
    """Lateness in ms per fire, grouped by instant; fires scheduled before `since_ns` are left out."""
    by_instant = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue
            task, scheduled, started = parts
            at = datetime.fromisoformat(scheduled.replace("Z", "+00:00"))
            at_ns = int(at.timestamp()) * 1_000_000_000
            if at_ns < since_ns:
                continue
            by_instant.setdefault(at_ns, []).append((int(started) - at_ns) / 1e6)
    return by_instant


def report(by_instant, tasks):
    every = [ms for fires in by_instant.values() for ms in fires]
    last = [max(fires) for fires in by_instant.values()]
    complete = sum(1 for fires in by_instant.values() if len(fires) == tasks)
    return {"instants": len(by_instant), "instants_complete": complete, "fires": len(every),
            "lateness_ms": summary(every), "last_of_instant_ms": summary(last)}


def zkcron_command(args, tmp, out):
    jobs = os.path.join(tmp, "jobs.d")
    os.mkdir(jobs)
    for i in range(args.tasks):
        with open(os.path.join(jobs, f"probe-{i:03d}.toml"), "w") as f:
            f.write(f'schedule = "* * * * * *"\ncommand = ["{PROBE}", "{out}"]\n'
                    'catch_up = "skip"\n')
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write("")  # defaults: text log at info, as a node runs
    return [BINARY, "run", "--config", config, "--jobs-dir", jobs,
            "--state-dir", os.path.join(tmp, "state"), "--node-id", "bench"]


def peer_command(args, tmp, out):
    return [PEER, str(args.tasks), PROBE, out]


def run_daemon(args, what="zkcron", command=zkcron_command):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probes.txt")
        argv = command(args, tmp, out)
        log = open(os.path.join(tmp, "log.txt"), "w")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            time.sleep(WARMUP_S)
            since_ns = (time.time_ns() // 1_000_000_000 + 1) * 1_000_000_000
            # Measure CPU over whole seconds from the first measured instant on.
            time.sleep(max(0.0, since_ns / 1e9 - time.time()) + 0.5)
            ran0, t0 = thread_cpu_ns(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            ran1, t1 = thread_cpu_ns(proc.pid), time.monotonic()
            cpu = cpu_seconds_between(ran0, ran1)
            until_ns = since_ns + int((t1 - t0) * 1e9)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
            if args.keep_log and what == "zkcron":
                shutil.copy(os.path.join(tmp, "log.txt"), args.keep_log)
        by_instant = {at: fires for at, fires in read_probes(out, since_ns).items()
                      if at < until_ns}
        result = report(by_instant, args.tasks)
        fires = result["fires"]
        result.update({
            "what": what, "tasks": args.tasks, "seconds": round(t1 - t0, 1),
            "cpu_percent_of_one_core": round(100 * cpu / (t1 - t0), 3),
            "cpu_us_per_fire": round(1e6 * cpu / fires, 1) if fires else None,
        })
        return result


def run_floor(args):
    """`tasks` posix_spawns of the probe from this thread at each second, as the floor."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probes.txt")
        pids = []
        end = time.time() + args.seconds
        while time.time() < end:
            next_s = time.time_ns() // 1_000_000_000 + 1
            time.sleep(max(0.0, next_s - time.time()))
            stamp = datetime.fromtimestamp(next_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            for i in range(args.tasks):
                env = {"ZKCRON_TASK": f"probe-{i:03d}", "ZKCRON_SCHEDULED_AT": stamp}
                pids.append(os.posix_spawn(PROBE, [PROBE, out], env))
            for pid in pids:
                os.waitpid(pid, 0)
            pids.clear()
        result = report(read_probes(out, 0), args.tasks)
        result.update({"what": "floor: posix_spawn from one thread", "tasks": args.tasks})
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep-log", metavar="FILE",
                        help="copy the daemon's log to FILE (its lateness_us and claim_to_spawn_us)")
    parser.add_argument("--compare", action="store_true",
                        help="each run: zkcron, then tokio-cron-scheduler (benches/peer) alike")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the same burst spawned by this script")
    args = parser.parse_args()
    for path in (BINARY, PROBE) + ((PEER,) if args.compare else ()):
        if not os.path.exists(path):
            sys.exit(f"{path} not found: run `cargo build --release --locked`, "
                     "`cargo build --release --locked --example probe` and (--compare) "
                     "`cargo build --release --locked --manifest-path benches/peer/Cargo.toml`"
                     " first")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    subjects = [("zkcron", zkcron_command)]
    if args.compare:
        subjects.append(("tokio-cron-scheduler", peer_command))
    for _ in range(args.runs):
        for what, command in subjects:
            result = run_daemon(args, what, command)
            result["loadavg_at_start"] = load
            print(json.dumps(result), flush=True)
            with open("/proc/loadavg") as f:
                load = f.read().split()[:3]
    if args.floor:
        print(json.dumps(run_floor(args)), flush=True)


if __name__ == "__main__":
    main()
