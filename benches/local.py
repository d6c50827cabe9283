#!/usr/bin/env python3
"""Benchmark of the embedded backend: fire lateness, start-up, RSS and idle CPU.

Usage:  cargo build --release && python3 benches/local.py [--seconds 60] [--tasks 10000] [--firing 200]
                                                         [--phase busy|idle|both|footprint|pool]
                                                         [--jitter 1s] [--runs 3]

Two phases, each on a fresh temp dir with N task files:
  busy:  `firing` tasks fire every second running `true`, the rest idle. Lateness per spawn is
         read from the daemon's JSON log ("started" events carry lateness_us = spawn - due).
  idle:  all N tasks idle. CPU is measured from /proc/<pid>/stat.
An idle task fires once a day, at minute i % 60 of the hour twelve hours from the start (UTC),
so none comes due during a run shorter than eleven hours: 60 distinct expressions. The idle
phase counts the daemon's "started" events and fails if any task fired.
  footprint: N idle tasks, (a) 61 distinct expressions and (b) N distinct ones,
         `runs` fresh daemons each; start-up, RSS and idle CPU per run and their medians, with
         the load average before and after (other processes on the machine skew the figures).
         RSS is read after the idle interval, when every task is planned; each run also
         gives its RSS by mapping ([heap], the binary, libc, ...).
  pool:  a plain task and a pool of 1,024 items with 100-character names (the largest
         `ZKCRON_WORK_ITEMS`, ~100 KiB of environment) both fire every second in the same
         daemon, `runs` times; the lateness of each task's spawns, p50 / p99 / max per run.
Start-up is the time from exec to the "zkcron started" log line (all files loaded and published).
Prints one JSON object per phase; docs/BENCHMARKS.md records the figures.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("ZKCRON_BIN", os.path.join(ROOT, "target", "release", "zkcron"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def idle_hour():
    """An hour of the day (UTC) twelve hours away: a daily task at that hour stays idle for a run."""
    return (time.gmtime().tm_hour + 12) % 24


def write_tasks(jobs, total, firing, jitter=None):
    hour = idle_hour()
    for i in range(total):
        schedule = "* * * * * *" if i < firing else f"{i % 60} {hour} * * *"
        extra = f'jitter = "{jitter}"\n' if jitter and i < firing else ""
        with open(os.path.join(jobs, f"task-{i:05d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule}"\ncommand = ["true"]\ncatch_up = "skip"\n{extra}')


def write_idle_tasks(jobs, total, distinct):
    """`total` idle tasks (none fires during a run shorter than eleven hours) with `distinct`
    different expressions: 61, or as many as tasks (up to 60 * 60 * 28)."""
    hour = idle_hour()
    for i in range(total):
        if distinct == 61:
            k = i % 61
            schedule = f"{k} {hour} * * *" if k < 60 else f"30 0 {hour} * * *"
        else:
            k = i % distinct
            schedule = f"{k % 60} {k // 60 % 60} {hour} {1 + k // 3600} * *"
        with open(os.path.join(jobs, f"task-{i:05d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule}"\ncommand = ["true"]\ncatch_up = "skip"\n')


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_by_mapping_mib(pid):
    """RSS per mapping name (the heap, the binary, libc, ...), the largest first: where it is."""
    rss, name = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                path = parts[5] if len(parts) > 5 else "[anon]"
                name = os.path.basename(path) if path.startswith("/") else path
            elif parts and parts[0] == "Rss:":
                rss[name] = rss.get(name, 0) + int(parts[1])
    top = sorted(rss.items(), key=lambda kv: -kv[1])[:5]
    return {k: round(v / 1024, 2) for k, v in top}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def start(tmp):
    log = open(os.path.join(tmp, "log.jsonl"), "w")
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write('[log]\nformat = "json"\n')
    env = dict(os.environ, ZKCRON_LOG="info,zkcron::job=warn")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [BINARY, "run", "--config", config, "--jobs-dir", os.path.join(tmp, "jobs.d"),
         "--state-dir", os.path.join(tmp, "state"), "--node-id", "bench"],
        stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = t0 + 60
    while time.monotonic() < deadline:
        with open(os.path.join(tmp, "log.jsonl")) as f:
            if "zkcron started" in f.read():
                return proc, time.monotonic() - t0
        time.sleep(0.01)
    proc.kill()
    sys.exit("zkcron did not start within 60 s")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def busy(args):
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "jobs.d"))
        write_tasks(os.path.join(tmp, "jobs.d"), args.tasks, args.firing, args.jitter)
        proc, startup = start(tmp)
        time.sleep(2)  # let the first second's burst settle before measuring
        with open(os.path.join(tmp, "log.jsonl")) as f:
            skip = sum(1 for _ in f)
        rss = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            rss.append(rss_kib(proc.pid))
            time.sleep(1)
        stop(proc)
        lateness = []
        claim_to_spawn = []
        with open(os.path.join(tmp, "log.jsonl")) as f:
            for n, line in enumerate(f):
                if n < skip:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("message") != "started":
                    continue
                if "lateness_us" in event:
                    lateness.append(int(event["lateness_us"]) / 1000)
                elif "lateness_ms" in event:  # older binaries
                    lateness.append(float(event["lateness_ms"]))
                # The won claim's answer -> the spawn: what a node killed in between leaves
                # claimed but not started.
                if "claim_to_spawn_us" in event:
                    claim_to_spawn.append(int(event["claim_to_spawn_us"]))
        return {
            "phase": "busy", "tasks": args.tasks, "firing_per_second": args.firing,
            "jitter": args.jitter,
            "seconds": args.seconds, "spawns": len(lateness),
            "spawns_expected": args.firing * args.seconds,
            "lateness_ms": {"p50": percentile(lateness, 50), "p99": percentile(lateness, 99),
                            "max": max(lateness)} if lateness else None,
            "claim_to_spawn_us": {"p50": percentile(claim_to_spawn, 50),
                                  "p99": percentile(claim_to_spawn, 99),
                                  "max": max(claim_to_spawn)} if claim_to_spawn else None,
            "startup_s": round(startup, 3), "rss_mib_max": round(max(rss) / 1024, 1),
        }


def pool_run(args):
    """One run of the pool phase: lateness in ms of each task's spawns, by task name."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = os.path.join(tmp, "jobs.d")
        os.mkdir(jobs)
        names = ", ".join(f'"{i:04d}-{"x" * 95}"' for i in range(1024))
        for name, extra in (("plain", ""), ("pool", f"work_items = [{names}]\n")):
            with open(os.path.join(jobs, f"{name}.toml"), "w") as f:
                f.write(f'schedule = "* * * * * *"\ncommand = ["true"]\ncatch_up = "skip"\n{extra}')
        proc, _ = start(tmp)
        time.sleep(2)
        with open(os.path.join(tmp, "log.jsonl")) as f:
            skip = sum(1 for _ in f)
        time.sleep(args.seconds)
        stop(proc)
        lateness = {"plain": [], "pool": []}
        with open(os.path.join(tmp, "log.jsonl")) as f:
            for n, line in enumerate(f):
                if n < skip:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("message") == "started" and "lateness_us" in event:
                    task = event.get("task") or event.get("span", {}).get("task")
                    if task in lateness:
                        lateness[task].append(int(event["lateness_us"]) / 1000)
        return lateness


def pool(args):
    runs = [pool_run(args) for _ in range(args.runs)]
    summary = {}
    for task in ("plain", "pool"):
        per_run = [{"spawns": len(r[task]), "p50": percentile(r[task], 50),
                    "p99": percentile(r[task], 99), "max": max(r[task])} for r in runs if r[task]]
        summary[task] = {"runs": per_run,
                         "p99_median": statistics.median(r["p99"] for r in per_run) if per_run else None}
    return {"phase": "pool", "seconds": args.seconds, "lateness_ms": summary}


def idle(args):
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "jobs.d"))
        write_tasks(os.path.join(tmp, "jobs.d"), args.tasks, 0)
        proc, startup = start(tmp)
        time.sleep(2)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        rss = rss_kib(proc.pid)
        stop(proc)
        fired = 0
        with open(os.path.join(tmp, "log.jsonl")) as f:
            for line in f:
                try:
                    fired += json.loads(line).get("message") == "started"
                except ValueError:
                    pass
        if fired:
            sys.exit(f"the idle phase was not idle: {fired} runs started")
        return {
            "phase": "idle", "tasks": args.tasks, "seconds": args.seconds, "runs_started": fired,
            "startup_s": round(startup, 3), "rss_mib": round(rss / 1024, 1),
            "cpu_percent_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 3),
        }


def footprint_run(args, distinct):
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "jobs.d"))
        write_idle_tasks(os.path.join(tmp, "jobs.d"), args.tasks, distinct)
        proc, startup = start(tmp)
        time.sleep(2)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        rss = rss_kib(proc.pid)
        where = rss_by_mapping_mib(proc.pid)
        stop(proc)
        with open(os.path.join(tmp, "log.jsonl")) as f:
            fired = sum(json.loads(line).get("message") == "started" for line in f
                        if line.startswith("{"))
        if fired:
            sys.exit(f"the footprint phase was not idle: {fired} runs started")
        return {"startup_s": round(startup, 3), "rss_mib": round(rss / 1024, 1),
                "cpu_percent_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 3),
                "rss_mib_by_mapping": where}


def footprint(args):
    result = {"phase": "footprint", "tasks": args.tasks, "seconds": args.seconds,
              "runs": args.runs, "binary": BINARY, "loadavg_before": os.getloadavg()}
    for distinct in (61, args.tasks):
        runs = [footprint_run(args, distinct) for _ in range(args.runs)]
        result[f"distinct_{distinct}"] = {
            "median": {key: statistics.median(run[key] for run in runs) for key in runs[0]
                       if key != "rss_mib_by_mapping"},
            "runs": runs,
        }
    result["loadavg_after"] = os.getloadavg()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--firing", type=int, default=200)
    parser.add_argument("--phase", choices=["busy", "idle", "both", "footprint", "pool"], default="both")
    parser.add_argument("--jitter", default=None,
                        help='e.g. "1s": spread the firing tasks over the second (lateness is '
                             'measured from the jittered due time)')
    parser.add_argument("--runs", type=int, default=3, help="footprint, pool: daemons per case")
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit(f"{BINARY} not found: run `cargo build --release` first")
    if args.phase in ("busy", "both"):
        print(json.dumps(busy(args)), flush=True)
    if args.phase in ("idle", "both"):
        print(json.dumps(idle(args)), flush=True)
    if args.phase == "footprint":
        print(json.dumps(footprint(args)), flush=True)
    if args.phase == "pool":
        print(json.dumps(pool(args)), flush=True)


if __name__ == "__main__":
    main()
