#!/usr/bin/env python3
"""Benchmark of `zkcron backfill` on the embedded backend: the wall time of a backfill of N ticks
of a job that takes 10 ms, and the overhead per tick (wall time / N - the job's 10 ms).

Usage:  cargo build --release && python3 benches/backfill.py [--ticks 1000] [--runs 3]

Each run starts a fresh daemon on a fresh temp dir with one task every minute whose job is
`sleep 0.01` (and records its fire id if it is a backfill's: the minute's own tick runs too), asks `zkcron backfill --wait` for the N minutes before a fixed instant long past,
and times the command from its start to its exit (the request, every tick's claim, spawn, run and
end, one at a time, and `--wait`'s polling every 200 ms). It checks that the job ran N times,
each fire id once. Prints one JSON object with each run and the medians.
`ZKCRON_BIN` picks another binary (default: target/release/zkcron).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("ZKCRON_BIN", os.path.join(ROOT, "target", "release", "zkcron"))
FROM = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
JOB_S = 0.010


def rfc(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def one_run(ticks):
    with tempfile.TemporaryDirectory() as home:
        os.chmod(home, 0o700)
        jobs, state = os.path.join(home, "jobs.d"), os.path.join(home, "state")
        os.mkdir(jobs, 0o755)
        config = os.path.join(home, "zkcron.toml")
        with open(config, "w") as f:
            f.write('[http]\nlisten = ""\n')
        out = os.path.join(home, "runs.log")
        with open(os.path.join(jobs, "bench.toml"), "w") as f:
            f.write(
                'schedule = "* * * * *"\n'
                f"command = ['/bin/sh', '-c', 'case \"$ZKCRON_FIRE_ID\" in *@backfill-*) echo \"$ZKCRON_FIRE_ID\" >> {out};; esac; sleep {JOB_S}']\n"
            )
        log = open(os.path.join(home, "log.txt"), "w")
        daemon = subprocess.Popen(
            [BINARY, "run", "--config", config, "--jobs-dir", jobs, "--state-dir", state,
             "--node-id", "bench"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            env=dict(os.environ, ZKCRON_LOG="warn,zkcron=info"),
        )
        try:
            deadline = time.monotonic() + 30
            while "zkcron started" not in open(log.name).read():
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon did not start")
                time.sleep(0.05)
            to = FROM + datetime.timedelta(minutes=ticks)
            start = time.monotonic()
            done = subprocess.run(
                [BINARY, "backfill", "bench", "--from", rfc(FROM), "--to", rfc(to), "--wait",
                 "--config", config, "--state-dir", state],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
            )
            wall = time.monotonic() - start
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            log.close()
        if done.returncode != 0:
            raise SystemExit(f"backfill failed: {done.stdout}{done.stderr}")
        ran = open(out).read().split()
        if len(ran) != ticks or len(set(ran)) != ticks:
            raise SystemExit(f"{len(ran)} runs, {len(set(ran))} distinct, of {ticks} ticks")
        return {"wall_s": round(wall, 3), "overhead_per_tick_ms": round((wall / ticks - JOB_S) * 1000, 3)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs = [one_run(args.ticks) for _ in range(args.runs)]
    print(json.dumps({
        "binary": BINARY,
        "ticks": args.ticks,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "runs": runs,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_overhead_per_tick_ms": statistics.median(r["overhead_per_tick_ms"] for r in runs),
    }))


if __name__ == "__main__":
    main()
