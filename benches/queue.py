#!/usr/bin/env python3
"""Benchmark of `overlap = "queue"`: the delay between the end of a run and the start of the
tick queued behind it.

Usage:  cargo build --release && python3 benches/queue.py [--phase same|handoff|both|floor]
            [--backend zookeeper|local] [--seconds 60] [--trials 10] [--runs 1]

Each phase starts its own standalone ZooKeeper (not `same --backend local`) and real `zkcron
run` nodes (release build), as benches/cluster.py does (its helpers are reused), and one task ticking every second whose run
takes 1.5 s (`sleep 1.5`) with `overlap = "queue"`: the tick due during a run waits and starts
when the run ends, the next one is dropped. The job logs `start <fire id> <node> <ns>` as its
first command and `end ...` as its last (`date +%s%N`), so the delay is measured from outside,
at the jobs themselves: from one run's `end` to the next run's `start`, which includes the exit
of the job, the claim of the queued tick in ZooKeeper, the spawn and the shell's own start.
  same:     1 node, `--seconds` of runs: every run after the first is a queued tick started on
            the node that ran the one before. `--backend local` runs the one node on the
            embedded backend instead (no ZooKeeper; its claims go to the state dir's journal).
  handoff:  2 nodes; per trial, while a tick waits behind the leader's run, `zkcron drain` the
            leader: its run goes on, the other node takes the lease, reads the queued tick and
            waits for that run's end (its live-run znode's deletion, watched), then starts it.
            The delay is from the old leader's `end` to the new leader's `start`. Then
            `undrain`, and the next trial waits for a queued tick again.
  floor:    what no daemon can cut: 100 multi-ops shaped as a run's end with the next tick's
            claim, 100 ms apart (after 50 back to back to warm the server), against a standalone
            ZooKeeper set up as in `same` (`examples/zk_commit.rs`, built with `cargo build
            --release --example zk_commit`),
            and 200 writes of 1 KiB, each followed by `fdatasync`, in the same temp dir, appended
            and over a preallocated file (the disk under the local backend's journal and under
            ZooKeeper's transaction log).
Prints one JSON object per phase with p50, p99 and max in ms, and the machine's facts first;
docs/BENCHMARKS.md records the figures.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (the ZooKeeper, node and process helpers)

RUN_SECONDS = "1.5"


def write_task(jobs, log):
    os.makedirs(jobs, exist_ok=True)
    command = (f'echo "start $ZKCRON_FIRE_ID $ZKCRON_NODE $(date +%s%N)" >> {log}; '
               f'sleep {RUN_SECONDS}; echo "end $ZKCRON_FIRE_ID $ZKCRON_NODE $(date +%s%N)" >> {log}')
    with open(os.path.join(jobs, "slow.toml"), "w") as f:
        f.write('schedule = "* * * * * *"\noverlap = "queue"\n'
                f"command = [\"/bin/sh\", \"-c\", '{command}']\n")


def runs(log):
    """[(fire id, node, start ns, end ns)] of the runs that ended, by start."""
    starts, ends = {}, {}
    try:
        with open(log) as f:
            for line in f:
                words = line.split()
                if len(words) != 4:
                    continue
                what, fire_id, node, ns = words
                (starts if what == "start" else ends)[fire_id] = (node, int(ns))
    except FileNotFoundError:
        return []
    out = [(fid, node, ns, ends[fid][1]) for fid, (node, ns) in starts.items() if fid in ends]
    return sorted(out, key=lambda r: r[2])


def started(log):
    """The fire ids started, with repeats (a fire id twice would be a tick run twice)."""
    try:
        with open(log) as f:
            return [line.split()[1] for line in f if line.startswith("start ")]
    except FileNotFoundError:
        return []


def delays_ms(pairs):
    return [(b[2] - a[3]) / 1e6 for a, b in pairs]


def cli(args, connect):
    subprocess.run([cluster.BINARY, *args, "--zookeeper", connect, "--cluster", "bench"],
                   check=True, capture_output=True)


def local_node(procs, tmp, jobs):
    """One `zkcron run` on the embedded backend (the default without `--zookeeper`)."""
    base = os.path.join(tmp, "n1")
    os.makedirs(base, exist_ok=True)
    config = os.path.join(base, "zkcron.toml")
    with open(config, "w") as f:
        f.write('[log]\nformat = "json"\n[http]\nlisten = ""\n')
    log = open(os.path.join(base, "log.jsonl"), "w")
    env = dict(os.environ, ZKCRON_LOG="info,zkcron::job=warn")
    return procs.spawn([cluster.BINARY, "run", "--config", config, "--jobs-dir", jobs,
                        "--state-dir", os.path.join(base, "state"), "--node-id", "n1"],
                       stdout=subprocess.DEVNULL, stderr=log, env=env)


def phase_same(args, tmp, procs):
    jobs, log = os.path.join(tmp, "jobs.d"), os.path.join(tmp, "jobs.log")
    write_task(jobs, log)
    if args.backend == "local":
        node = local_node(procs, tmp, jobs)
    else:
        zk = cluster.ZooKeeper(procs, tmp)
        node = cluster.Node(procs, tmp, zk.connect("/queue"), "n1", jobs).proc
    cluster.wait_for("the first run to end", lambda: runs(log), 30)
    time.sleep(args.seconds)
    done = runs(log)
    node.expected_exit = True  # the node first, so that it closes its session
    node.terminate()
    node.wait(timeout=30)
    pairs = list(zip(done, done[1:]))
    delays = delays_ms(pairs)
    ids = started(log)
    return {"phase": "same", "backend": args.backend, "nodes": 1, "runs": len(done),
            "delays": len(delays), "delay_ms": cluster.summary(delays),
            "run_twice": len(ids) - len(set(ids))}


def queued_waiting(nodes):
    """The node whose log says a tick was queued last, if any (its JSON log)."""
    for node in nodes:
        with open(node.log_path) as f:
            if any("queued: the previous run is still going" in line for line in f):
                return node
    return None


def phase_handoff(args, tmp, procs):
    zk = cluster.ZooKeeper(procs, tmp)
    connect = zk.connect("/queue")
    jobs, log = os.path.join(tmp, "jobs.d"), os.path.join(tmp, "jobs.log")
    write_task(jobs, log)
    nodes = {i: cluster.Node(procs, tmp, connect, i, jobs) for i in ("n1", "n2")}
    cluster.wait_for("the first run to end", lambda: runs(log), 30)
    delays, failures = [], []
    for _ in range(args.trials):
        # Wait for a run that has a tick queued behind it: a run that started at least 1.1 s
        # ago and has not ended (the tick of the second after its start is queued by now).
        def live_run():
            done = {r[0] for r in runs(log)}
            now = time.time_ns()
            with open(log) as f:
                for line in f:
                    words = line.split()
                    if (len(words) == 4 and words[0] == "start" and words[1] not in done
                            and 1.1e9 < now - int(words[3]) < 1.3e9):
                        return words[1], words[2]
            return None
        fire_id, leader = cluster.wait_for("a run with a tick queued", live_run, 30, 0.01)
        cli(["drain", leader], connect)
        other = "n2" if leader == "n1" else "n1"

        def handed():
            done = runs(log)
            old = [r for r in done if r[0] == fire_id]
            new = [r for r in done if r[1] == other and old and r[2] >= old[0][3]]
            return (old[0], new[0]) if new else None
        try:
            old, new = cluster.wait_for("the queued tick on the other node", handed, 30)
            delays.append((new[2] - old[3]) / 1e6)
        except TimeoutError as e:
            failures.append(str(e))
        cli(["undrain", leader], connect)
        time.sleep(2)
    for node in nodes.values():
        node.term()
    for node in nodes.values():
        node.wait()
    ids = started(log)
    return {"phase": "handoff", "nodes": 2, "trials": args.trials, "delays": len(delays),
            "delay_ms": cluster.summary(delays), "failures": failures,
            "run_twice": len(ids) - len(set(ids))}


def fdatasync_ms(directory, count, preallocated):
    """`count` writes of 1 KiB to a file in `directory`, each followed by `fdatasync`: appended
    (the file grows: the local backend's journal), or over a preallocated file (ZooKeeper's
    transaction log, which preallocates 64 MiB: no metadata to commit)."""
    times = []
    path = os.path.join(directory, "prealloc.bench" if preallocated else "append.bench")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        if preallocated:
            os.write(fd, bytes(1024 * count))
            os.fsync(fd)
        for i in range(count):
            t0 = time.perf_counter()
            os.pwrite(fd, b"x" * 1024, i * 1024)
            os.fdatasync(fd)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.close(fd)
    return times


def phase_floor(args, tmp, procs):
    example = os.path.join(cluster.ROOT, "target", "release", "examples", "zk_commit")
    if not os.path.exists(example):
        sys.exit(f"{example} not found: run `cargo build --release --example zk_commit` first")
    zk = cluster.ZooKeeper(procs, tmp)
    # The first commits warm the server's JIT and the session: measured after 50 of them.
    subprocess.run([example, zk.connect(""), "50"], check=True, capture_output=True)
    out = subprocess.run([example, zk.connect(""), "100", "100"], check=True,
                         capture_output=True, text=True).stdout
    commit = json.loads(out)
    appended = cluster.summary(fdatasync_ms(tmp, 200, preallocated=False))
    overwritten = cluster.summary(fdatasync_ms(tmp, 200, preallocated=True))
    return {"phase": "floor", "zk_multi_ms": {"n": commit["commits"], "p50": commit["p50_ms"],
                                              "p99": commit["p99_ms"], "max": commit["max_ms"]},
            "fdatasync_append_ms": appended, "fdatasync_preallocated_ms": overwritten}


PHASES = {"same": phase_same, "handoff": phase_handoff, "floor": phase_floor}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=["same", "handoff", "both", "floor"], default="both")
    parser.add_argument("--backend", choices=["zookeeper", "local"], default="zookeeper",
                        help="the backend of `same` (the other phases use ZooKeeper)")
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if not os.path.exists(cluster.BINARY):
        sys.exit(f"{cluster.BINARY} not found: run `cargo build --release` first")
    print(json.dumps({"machine": cluster.machine_facts(), "binary": cluster.BINARY}), flush=True)
    phases = ["same", "handoff"] if args.phase == "both" else [args.phase]
    for name in phases:
        for run in range(args.runs):
            procs = cluster.Processes()
            cluster.CURRENT[:] = [procs]
            with tempfile.TemporaryDirectory(prefix="zkcron-queue-bench-") as tmp:
                try:
                    result = PHASES[name](args, tmp, procs)
                finally:
                    procs.stop_all()
            result["run"] = run + 1
            result["loadavg_after"] = os.getloadavg()
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
