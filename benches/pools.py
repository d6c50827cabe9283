#!/usr/bin/env python3
"""Benchmark of work pools (`work_items`) on the ZooKeeper backend: the cluster at rest, and
pooled runs audited per (tick, item) while nodes are killed.

Usage:  CARGO_PROFILE_RELEASE_LTO=thin cargo build --release --bin zkcron
        python3 benches/pools.py --phase rest|kill [--runs 1] [--keep] [--tmpdir DIR]
            rest: [--tasks 10000] [--nodes 20] [--pools 10] [--items 1000] [--baseline]
            kill: [--nodes 20] [--items 1000] [--seconds 600] [--kill-every 60]
                  [--restart-delay 5] [--on-node-loss skip|rerun] [--seed 1]

The machinery (a standalone ZooKeeper from Debian's package on a free loopback port, real
`zkcron run` processes with JSON logs, temp dirs, everything stopped on every exit path) is
benches/cluster.py's.
  rest:  `--nodes` nodes share a jobs dir of `--tasks` hourly tasks spread over the hour, of
         which `--pools` carry `work_items = --items`. Once ZooKeeper holds a lease for every
         plain task and every item's unit, unchanged for 10 s: znodes (the empty server's
         subtracted), ephemerals, watches (`mntr`'s zk_watch_count and the `wchs` four-letter
         word: connections, watched paths, watches), each per (tasks + nodes + items), beside
         tasks × nodes (what one watch or znode per task and node would cost); the items each
         node holds per pool (largest share over the even one). `--baseline` first runs the
         same cluster with no pool (`--tasks` plain tasks), so the pools' own cost is the
         difference, per item.
  kill:  `--nodes` nodes, one pool of `--items` items and one plain task, both every second
         with `catch_up = "all"` and `starting_deadline = "1m"`;
         every `--kill-every` s one node (seeded choice) is killed with SIGKILL and started again
         `--restart-delay` s later (same node id), for `--seconds`. Each run appends
         `<fire id> <items>` to a file of its node. The audit counts, per (tick, item) over the
         ticks from the first to the last whole second measured: pairs run twice (want 0), and
         pairs missing, apart from those skipped by `overlap = "skip"` (logged per item) and
         those of a tick a killed node claimed and did not run (its log says it claimed it;
         its items are those it ran the tick before: `on_node_loss = "skip"` runs them
         nowhere, by design); with
         `--on-node-loss rerun` every pair must run. Lateness of the pool's runs and of the plain
         task's (the `started` events' `lateness_us`), p50 / p99.
Prints one JSON object per run (the machine facts first); docs/BENCHMARKS.md records the figures.
"""
import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (benches/cluster.py: the machinery)
from cluster import Node, Run, lease_map, percentile, sleep_until  # noqa: E402


def write_jobs(jobs, plain, pools, items, schedule_of, command='["true"]'):
    """`plain` tasks `task-NNNNN` and `pools` pooled tasks `pool-NN` of `items` items each."""
    os.makedirs(jobs, exist_ok=True)
    for i in range(plain):
        with open(os.path.join(jobs, f"task-{i:05d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule_of(i)}"\ncommand = {command}\n')
    for p in range(pools):
        with open(os.path.join(jobs, f"pool-{p:02d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule_of(p)}"\ncommand = {command}\n'
                    f"work_items = {items}\n")


def wchs(zk):
    """(connections, watched paths, watches) from the `wchs` four-letter word."""
    text = zk.word("wchs")
    m = re.search(r"(\d+) connections watching (\d+) paths\s+Total watches:(\d+)", text)
    if not m:
        raise RuntimeError(f"unexpected wchs answer: {text!r} (is wchs whitelisted?)")
    return tuple(int(x) for x in m.groups())


def shares(holder_of, pools, items, n_nodes):
    """The largest number of items one node holds in any pool, over the even share."""
    worst = 0
    for p in range(pools):
        per_node = {}
        for i in range(items):
            node = holder_of.get(f"pool-{p:02d}@{i}")
            per_node[node] = per_node.get(node, 0) + 1
        worst = max(worst, max(per_node.values()))
    return round(worst / (items / n_nodes), 3)


def rest_once(args, pools):
    plain = args.tasks - pools
    expected = plain + pools * args.items
    chroot = "/pools"
    with Run("pools-rest", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        write_jobs(jobs, plain, pools, args.items, lambda i: f"{i % 60} * * * *")
        connect = run.zk.connect(chroot)
        empty = int(run.zk.mntr()["zk_znode_count"])
        t0 = time.time()
        nodes = [Node(run.procs, run.tmp, connect, f"n{i + 1:02d}", jobs,
                      session_timeout=args.session_timeout) for i in range(args.nodes)]
        settled, stable_since, previous = None, time.time(), None
        deadline = time.monotonic() + args.deadline
        while time.monotonic() < deadline:
            cluster.check_processes()
            holder_of, members = lease_map(run.zk, chroot)
            now = time.time()
            if len(holder_of) == expected and members == args.nodes and holder_of == previous:
                if now - stable_since >= 10:
                    settled = stable_since
                    break
            else:
                stable_since = now
            previous = holder_of
            time.sleep(1)
        mntr = run.zk.mntr()
        connections, paths, watches = wchs(run.zk)
        holder_of, members = lease_map(run.zk, chroot)
        base = args.tasks + args.nodes + pools * args.items
        znodes = int(mntr["zk_znode_count"]) - empty
        result = {
            "phase": "rest", "tasks": args.tasks, "pools": pools, "items": args.items,
            "nodes": args.nodes, "settled": settled is not None,
            "settle_s": round(settled - t0, 1) if settled else None,
            "leases": len(holder_of), "leases_expected": expected,
            "znodes": znodes, "ephemerals": int(mntr["zk_ephemerals_count"]),
            "zk_watch_count": int(mntr["zk_watch_count"]),
            "wchs": {"connections": connections, "paths": paths, "watches": watches},
            "per_task_node_item": {"znodes": round(znodes / base, 3),
                                   "watches": round(watches / base, 3)},
            "tasks_times_nodes": args.tasks * args.nodes,
            "largest_share_over_even": shares(holder_of, pools, args.items, args.nodes)
            if pools else None,
            "zk_data_kib": round(int(mntr["zk_approximate_data_size"]) / 1024),
        }
        if settled is None:
            result["details"] = cluster.diagnose(nodes)
            run.keep = True
            result["tmp"] = run.tmp
        return result


def rest(args):
    results = []
    if args.baseline:
        results.append(rest_once(args, 0))
        print(json.dumps(results[-1]), flush=True)
    results.append(rest_once(args, args.pools))
    if args.baseline and all(r["settled"] for r in results):
        before, after = results
        added = args.pools * args.items
        results[-1]["per_item_over_baseline"] = {
            "znodes": round((after["znodes"] - before["znodes"]) / added, 3),
            "watches": round((after["wchs"]["watches"] - before["wchs"]["watches"]) / added, 3),
        }
    return results[-1]


def run_lines(out_dir):
    """{(tick, item): [node, ...]} from the jobs' own files, and {(node, tick): items} of
    each run."""
    pairs, ran = {}, {}
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as f:
            for line in f:
                fire_id, _, items = line.strip().partition(" ")
                _, _, unix = fire_id.rpartition("@")
                if not unix.isdigit():
                    continue
                items = set(filter(None, items.split(",")))
                ran.setdefault((name, int(unix)), set()).update(items)
                for item in items:
                    pairs.setdefault((int(unix), item), []).append(name)
    return pairs, ran


def claimed_by_killed(incarnations):
    """{tick: {node, ...}} of the pool's ticks a killed node's incarnation logged as claimed
    (`claimed ahead of its instant`)."""
    out = {}
    for node in incarnations:
        if not getattr(node, "killed", False):
            continue
        for e in node.events:
            fire_id = e.get("fire_id", "")
            if fire_id.startswith("pool@") and e.get("message") == "claimed ahead of its instant":
                out.setdefault(int(fire_id.rpartition("@")[2]), set()).add(node.id)
    return out


def overlap_skipped(incarnations):
    """{(tick, item)} of the pool's runs skipped by `overlap = "skip"`, as logged per item."""
    out = set()
    for node in incarnations:
        for e in node.events:
            fire_id = e.get("fire_id", "")
            if fire_id.startswith("pool@") and e.get("message", "").startswith(
                    "skipped: the previous run is still going"):
                tick = int(fire_id.rpartition("@")[2])
                out.update((tick, item) for item in str(e.get("work_items", "")).split(","))
    return out


def audit_pairs(pairs, ran, killed, items, first, last, skipped=frozenset()):
    """Pairs run twice, and pairs missing apart from those of a tick a killed node claimed
    and did not run: its items then are taken to be those it ran the tick before."""
    twice = {k: v for k, v in pairs.items() if first <= k[0] <= last and len(v) > 1}
    missing, excused, skips = [], 0, 0
    for tick in range(first, last + 1):
        for item in items:
            if (tick, item) in pairs:
                continue
            if (tick, item) in skipped:
                skips += 1
            elif any(item in ran.get((node, tick - 1), ()) for node in killed.get(tick, ())):
                excused += 1
            else:
                missing.append(f"{tick}/{item}")
    return {"pairs_checked": (last - first + 1) * len(items), "run_twice": len(twice),
            "run_twice_examples": [f"{t}/{i} on {n}" for (t, i), n in list(twice.items())[:5]],
            "missing": len(missing), "missing_examples": missing[:10],
            "not_run_claimed_by_a_killed_node": excused, "skipped_by_overlap_policy": skips}


def lateness_of(nodes, task):
    values = [int(e["lateness_us"]) / 1000 for n in nodes for e in n.events
              if e.get("message") == "started" and e.get("attempt", 1) == 1
              and e.get("fire_id", "").startswith(f"{task}@") and "lateness_us" in e]
    if not values:
        return None
    return {"runs": len(values), "p50_ms": round(percentile(values, 50), 2),
            "p99_ms": round(percentile(values, 99), 2)}


# Every missed tick is caught up (a killed owner's items' ticks, run by their new owners once
# its session expired): only a tick claimed by a node that died before running it is lost.
CATCH_UP = 'catch_up = "all"\nstarting_deadline = "1m"\n'


def kill(args):
    chroot = "/pools"
    rng = random.Random(args.seed)
    items = [str(i) for i in range(args.items)]
    with Run("pools-kill", args.keep, args.tmpdir) as run:
        out = os.path.join(run.tmp, "out")
        os.makedirs(out)
        jobs = os.path.join(run.tmp, "jobs.d")
        os.makedirs(jobs)
        job = f'echo "$ZKCRON_FIRE_ID $ZKCRON_WORK_ITEMS" >> {out}/"$ZKCRON_NODE"'
        with open(os.path.join(jobs, "pool.toml"), "w") as f:
            f.write(f"schedule = \"* * * * * *\"\ncommand = '{job}'\n{CATCH_UP}"
                    f'work_items = {args.items}\non_node_loss = "{args.on_node_loss}"\n')
        with open(os.path.join(jobs, "plain.toml"), "w") as f:
            f.write(f'schedule = "* * * * * *"\ncommand = ["true"]\n{CATCH_UP}')
        connect = run.zk.connect(chroot)

        def start(node_id, incarnation):
            return Node(run.procs, run.tmp, connect, node_id, jobs,
                        session_timeout=args.session_timeout, incarnation=incarnation)

        live = {f"n{i + 1:02d}": start(f"n{i + 1:02d}", 0) for i in range(args.nodes)}
        every = list(live.values())
        # Settled: every item's unit held, by as many nodes as there are.
        cluster.wait_for("every item's unit held", lambda: sum(
            1 for t in lease_map(run.zk, chroot)[0] if t.startswith("pool@")) == args.items,
            args.deadline, 0.5)
        first = math.ceil(time.time()) + 2
        end = first + args.seconds
        kills = []
        next_kill = first + args.kill_every
        while time.time() < end:
            sleep_until(min(next_kill, end))
            if time.time() >= end:
                break
            victim_id = rng.choice(sorted(live))
            victim = live.pop(victim_id)
            t_kill = time.time()
            victim.kill9()
            victim.wait()
            kills.append({"node": victim_id, "at": round(t_kill, 3)})
            sleep_until(min(t_kill + args.restart_delay, end))
            incarnation = sum(1 for n in every if n.id == victim_id)
            live[victim_id] = start(victim_id, incarnation)
            every.append(live[victim_id])
            next_kill += args.kill_every
        last = int(time.time()) - 2
        time.sleep(3)
        for n in every:
            n.poll()
        pairs, ran = run_lines(out)
        result = {"phase": "kill", "nodes": args.nodes, "items": args.items,
                  "seconds": last - first + 1, "kills": len(kills),
                  "on_node_loss": args.on_node_loss,
                  "audit": audit_pairs(pairs, ran, claimed_by_killed(every), items, first, last,
                                       overlap_skipped(every)),
                  "lateness": {"pool": lateness_of(every, "pool"),
                               "plain": lateness_of(every, "plain")},
                  "warnings": cluster.anomalies(every)}
        if result["audit"]["run_twice"] or (
                result["audit"]["missing"] and args.on_node_loss == "skip"):
            run.keep = True
            result["tmp"] = run.tmp
        return result


PHASES = {"rest": rest, "kill": kill}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=list(PHASES), required=True)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--baseline", action="store_true",
                        help="rest: first the same cluster without pools")
    parser.add_argument("--seconds", type=int, default=600, help="kill: seconds measured")
    parser.add_argument("--kill-every", type=int, default=60)
    parser.add_argument("--restart-delay", type=float, default=5)
    parser.add_argument("--on-node-loss", choices=["skip", "rerun"], default="skip")
    parser.add_argument("--session-timeout", default="3s")
    parser.add_argument("--deadline", type=int, default=900, help="seconds to settle at most")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep temp dirs and logs")
    parser.add_argument("--tmpdir", default=None)
    args = parser.parse_args()
    if not os.path.exists(cluster.BINARY):
        sys.exit(f"{cluster.BINARY} not found: build the release binary first (or set ZKCRON_BIN)")
    print(json.dumps({"machine": cluster.machine_facts(), "binary": cluster.BINARY}), flush=True)
    results = []
    for i in range(args.runs):
        args.seed += i
        result = PHASES[args.phase](args)
        result["run"] = i + 1
        results.append(result)
        print(json.dumps(result), flush=True)
    if len(results) > 1 and args.phase == "rest":
        for key in ("znodes", "ephemerals", "zk_watch_count"):
            print(json.dumps({key: statistics.median(r[key] for r in results)}), flush=True)


if __name__ == "__main__":
    main()
