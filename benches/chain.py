#!/usr/bin/env python3
"""Benchmark of chaining (`after`): child runs per parent success while the parent's leader is
killed (kill -9) every `--kill-every` seconds.

Usage:  cargo build --release && python3 benches/chain.py [--seconds 180] [--kill-every 30]

A standalone ZooKeeper and three real `zkcron run` nodes (release build; benches/cluster.py's
helpers), one task `extract` ticking every second and a task `load` with `after = ["extract"]`.
Each job logs `<fire id> <node>` as its only command, so the runs are counted from outside, at
the jobs. Every `--kill-every` seconds the node that ran the newest `extract` is killed with
SIGKILL and started again (same id) a second later. After `--seconds`, the nodes run 10 s more
with no kill (so that every request made is run), then stop.

Each parent run (a fire id `extract@<unix>` in the log) is counted with the child runs
(`load@after-extract@<unix>`) after it: exactly 1 is the promise for a success whose result was
stored; 0 is allowed only for a parent run cut short by a kill (its result never stored: at
most one or two per kill, with the tick claimed ahead); more than 1 is a violation. Prints one
JSON object with the counts and the machine's facts; docs/BENCHMARKS.md records the figures.
"""
import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (the ZooKeeper, node and process helpers)


def write_tasks(jobs, log):
    os.makedirs(jobs, exist_ok=True)
    command = f'echo "$ZKCRON_FIRE_ID $ZKCRON_NODE" >> {log}'
    with open(os.path.join(jobs, "extract.toml"), "w") as f:
        f.write(f'schedule = "* * * * * *"\ncommand = ["/bin/sh", "-c", \'{command}\']\n')
    with open(os.path.join(jobs, "load.toml"), "w") as f:
        f.write(f'after = ["extract"]\ncommand = ["/bin/sh", "-c", \'{command}\']\n')


def lines(log):
    try:
        with open(log) as f:
            return [line.split() for line in f if len(line.split()) == 2]
    except FileNotFoundError:
        return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--kill-every", type=int, default=30)
    args = parser.parse_args()
    if not os.path.exists(cluster.BINARY):
        sys.exit(f"{cluster.BINARY} not found: run `cargo build --release` first")
    print(json.dumps({"machine": cluster.machine_facts(), "binary": cluster.BINARY}), flush=True)
    procs = cluster.Processes()
    cluster.CURRENT[:] = [procs]
    with tempfile.TemporaryDirectory(prefix="zkcron-chain-bench-") as tmp:
        try:
            result = run(args, tmp, procs)
        finally:
            procs.stop_all()
    result["loadavg_after"] = os.getloadavg()
    print(json.dumps(result), flush=True)


def run(args, tmp, procs):
    zk = cluster.ZooKeeper(procs, tmp)
    connect = zk.connect("/chain")
    jobs, log = os.path.join(tmp, "jobs.d"), os.path.join(tmp, "jobs.log")
    write_tasks(jobs, log)
    incarnations = collections.Counter()
    nodes = {i: cluster.Node(procs, tmp, connect, i, jobs) for i in ("n1", "n2", "n3")}
    cluster.wait_for("the first chained run", lambda: any(
        w[0].startswith("load@") for w in lines(log)), 60)
    start, kills = time.time(), 0
    while time.time() - start < args.seconds:
        time.sleep(args.kill_every)
        parents = [w for w in lines(log) if w[0].startswith("extract@")]
        leader = parents[-1][1]
        nodes[leader].kill9()
        nodes[leader].wait()
        kills += 1
        time.sleep(1)
        incarnations[leader] += 1
        nodes[leader] = cluster.Node(procs, tmp, connect, leader, jobs,
                                     incarnation=incarnations[leader])
    time.sleep(10)
    for node in nodes.values():
        node.term()
    for node in nodes.values():
        node.wait()
    runs = lines(log)
    parents = collections.Counter(w[0] for w in runs if w[0].startswith("extract@"))
    children = collections.Counter(w[0][len("load@after-"):] for w in runs
                                   if w[0].startswith("load@after-"))
    per_parent = collections.Counter(children.get(p, 0) for p in parents)
    return {
        "seconds": args.seconds, "kill_every": args.kill_every, "kills": kills,
        "parent_runs": len(parents), "parent_run_twice": sum(c > 1 for c in parents.values()),
        "child_runs": sum(children.values()),
        "children_per_parent": {str(k): v for k, v in sorted(per_parent.items())},
        "child_without_parent": sum(1 for p in children if p not in parents),
    }


if __name__ == "__main__":
    main()
