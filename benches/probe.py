#!/usr/bin/env python3
"""Cost per fire and same-instant bursts, seen from outside.

Usage:  cargo build --release --locked && cargo build --release --locked --example probe
        python3 benches/probe.py [--seconds 60] [--tasks 10] [--idle 0] [--runs 1] [--floor]
                                 [--compare] [--phases]
        (--compare: also `cargo build --release --locked --manifest-path benches/peer/Cargo.toml
        --target-dir target`: the peer's build shares the project's target dir)

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
(no timer slack, claim or logging): the machine's floor under `tasks` spawns + execs, measured
after each run (each pair), so that both see the same load.
--idle N: N more task files, hourly at a minute half an hour away: loaded, never due.
--phases: the four phases of the side-by-side table in docs/BENCHMARKS.md, each run of each
phase a pair (zkcron, then the peer): 10,000 loaded of which 200 fire at one instant each
second; 10,000 of which 10; 10 tasks, all every second; 10,000 hourly tasks, idle.
Each run also reports VmRSS and RssAnon (its binary read into the page cache first) at the end of its window and the CPU of each thread
(by name) per fire, or in µs per second when nothing fires.
--ab BINARY: each run also runs this other zkcron build (after ZKCRON_BIN's), for an A/B of two
builds under the same load.
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
                      os.path.join(ROOT, "target", "release", "zkcron-peer"))
WARMUP_S = 3
# The phases of --phases: (every-second tasks, idle hourly tasks).
PHASES = [(200, 9800), (10, 9990), (10, 0), (0, 10000)]


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


def thread_cpu_by_name(pid):
    """{tid: (name, ns)} of every live thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = (name, int(f.read().split()[0]))
        except OSError:
            pass  # ended meanwhile
    return out


def by_name_between(before, after):
    """The ns each thread name ran between two `thread_cpu_by_name` readings."""
    per = {}
    for tid, (name, ns) in after.items():
        per[name] = per.get(name, 0) + ns - before.get(tid, (name, 0))[1]
    return per


def memory_kib(pid):
    """VmRSS and RssAnon of `pid`, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(status[k].split()[0]) for k in ("VmRSS", "RssAnon")}


def idle_minute():
    """The minute of the hour half an hour from now: hourly tasks there never fire meanwhile."""
    return (time.gmtime().tm_min + 30) % 60


def wait_for(path, needle, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            if needle in f.read():
                return
        time.sleep(0.05)
    sys.exit(f"probe.py: no {needle!r} in {path} within {timeout} s")


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
    if not os.path.exists(path):
        return by_instant  # nothing fired
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


def zkcron_command(args, tmp, out, binary=None):
    jobs = os.path.join(tmp, "jobs.d")
    os.mkdir(jobs)
    minute = idle_minute()
    for i in range(args.tasks + args.idle):
        schedule = "* * * * * *" if i < args.tasks else f"0 {minute} * * * *"
        with open(os.path.join(jobs, f"probe-{i:03d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule}"\ncommand = ["{PROBE}", "{out}"]\n'
                    'catch_up = "skip"\n')
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write("")  # defaults: text log at info, as a node runs
    return [binary or BINARY, "run", "--config", config, "--jobs-dir", jobs,
            "--state-dir", os.path.join(tmp, "state"), "--node-id", "bench"]


def peer_command(args, tmp, out):
    return [PEER, str(args.tasks), PROBE, out, str(args.idle), str(idle_minute())]




def read_whole(path):
    """Reads `path` into the page cache: the kernel maps the cached neighbours of each page a
    daemon touches (64 KiB of fault-around), so its RSS depends on how much of its binary is
    cached; every run starts with the whole binary cached (as after an install: the most)."""
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def run_daemon(args, what="zkcron", command=zkcron_command):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "probes.txt")
        argv = command(args, tmp, out)
        read_whole(argv[0])
        log = open(os.path.join(tmp, "log.txt"), "w")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for(log.name, "started" if what == "tokio-cron-scheduler" else "zkcron started")
            time.sleep(WARMUP_S)
            since_ns = (time.time_ns() // 1_000_000_000 + 1) * 1_000_000_000
            # Measure CPU over whole seconds from the first measured instant on.
            time.sleep(max(0.0, since_ns / 1e9 - time.time()) + 0.5)
            ran0, t0 = thread_cpu_by_name(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            ran1, t1 = thread_cpu_by_name(proc.pid), time.monotonic()
            memory = memory_kib(proc.pid)
            threads = by_name_between(ran0, ran1)
            cpu = sum(threads.values()) / 1e9
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
        per = fires or (t1 - t0)
        result.update({
            "what": what, "binary": argv[0], "tasks": args.tasks, "idle": args.idle, "seconds": round(t1 - t0, 1),
            "cpu_percent_of_one_core": round(100 * cpu / (t1 - t0), 3),
            "cpu_us_per_fire": round(1e6 * cpu / fires, 1) if fires else None,
            "rss_mib": round(memory["VmRSS"] / 1024, 2),
            "rss_anon_mib": round(memory["RssAnon"] / 1024, 2),
            ("thread_us_per_fire" if fires else "thread_us_per_second"): {
                name: round(ns / 1000 / per, 1)
                for name, ns in sorted(threads.items(), key=lambda kv: -kv[1]) if ns},
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
    parser.add_argument("--idle", type=int, default=0,
                        help="more tasks, hourly at a minute half an hour away (never due)")
    parser.add_argument("--phases", action="store_true",
                        help="the four phases of the side-by-side table (sets --tasks, --idle)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep-log", metavar="FILE",
                        help="copy the daemon's log to FILE (its lateness_us and claim_to_spawn_us)")
    parser.add_argument("--compare", action="store_true",
                        help="each run: zkcron, then tokio-cron-scheduler (benches/peer) alike")
    parser.add_argument("--ab", metavar="BINARY",
                        help="each run: also this zkcron build, right after ZKCRON_BIN's")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the same burst spawned by this script")
    args = parser.parse_args()
    for path in (BINARY, PROBE) + ((PEER,) if args.compare else ()):
        if not os.path.exists(path):
            sys.exit(f"{path} not found: run `cargo build --release --locked`, "
                     "`cargo build --release --locked --example probe` and (--compare) "
                     "`cargo build --release --locked --manifest-path benches/peer/Cargo.toml "
                     "--target-dir target`"
                     " first")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    subjects = [("zkcron", zkcron_command)]
    if args.ab:
        other = os.path.abspath(args.ab)
        subjects.append((f"zkcron {other}",
                         lambda args, tmp, out: zkcron_command(args, tmp, out, other)))
    if args.compare:
        subjects.append(("tokio-cron-scheduler", peer_command))
    phases = PHASES if args.phases else [(args.tasks, args.idle)]
    for args.tasks, args.idle in phases:
        for _ in range(args.runs):
            for what, command in subjects:
                result = run_daemon(args, what, command)
                result["loadavg_at_start"] = load
                print(json.dumps(result), flush=True)
                with open("/proc/loadavg") as f:
                    load = f.read().split()[:3]
            if args.floor and args.tasks:
                print(json.dumps(run_floor(args)), flush=True)


if __name__ == "__main__":
    main()
