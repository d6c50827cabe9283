#!/usr/bin/env python3
"""Benchmark of the dashboard: how long `/` and `/api/status` take on a large cluster, and what
a dashboard left open costs an idle node.

Usage:  cargo build --release --bin zkcron --example status_load &&
        python3 benches/dashboard.py [--tasks 10000] [--nodes 20] [--runs 20] [--idle-seconds 60]

Phase `large`: a standalone ZooKeeper with the records of a `--tasks` x `--nodes` cluster
(`examples/status_load.rs`, as benches/status.py) and one real node of it serving HTTP (its jobs
dir empty, so it leads nothing, and the 21st member); then `--runs` requests of each page, one
every 0.5 s (as viewers whose refreshes find the cached snapshot fresh or stale), timed end to
end: the first (the cached snapshot too old to serve: a read of the whole cluster), then the
median and maximum of the rest.

Phase `idle`: a node of the local backend with 20 daily tasks, first with no viewer, then with a
viewer fetching `/` every 5 s (what the page's script does), each for `--idle-seconds`: the
daemon's CPU time (utime + stime) over wall time, in percent of one core.

Prints one JSON object with the machine facts; stops everything it started, also on failure.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from status import LOADER, ZK_JAR, ZKCRON, free_port, wait_for, word  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def get(url):
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status}")
    return time.monotonic() - start, body


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_node(tmp, config_text, args):
    jobs = os.path.join(tmp, "jobs.d")
    os.makedirs(jobs, exist_ok=True)
    os.chmod(jobs, 0o755)
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write(config_text)
    log = open(os.path.join(tmp, "node.log"), "w")
    node = subprocess.Popen([ZKCRON, "run", "--config", config, "--jobs-dir", jobs] + args,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return node, jobs


def stop(process):
    if process is None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def timings(url, runs):
    first = get(url)[0]
    rest = []
    for _ in range(runs):
        time.sleep(0.5)
        rest.append(get(url)[0])
    return {"first_s": round(first, 3), "median_s": round(statistics.median(rest), 3),
            "max_s": round(max(rest), 3)}


def large(args, tmp):
    zk = node = None
    try:
        os.makedirs(os.path.join(tmp, "data"))
        port = free_port()
        config = os.path.join(tmp, "zoo.cfg")
        with open(config, "w") as f:
            f.write(f"tickTime=500\ndataDir={tmp}/data\nclientPort={port}\n"
                    "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=*\n")
        zk = subprocess.Popen(["java", "-Xmx1g", "-cp", ZK_JAR,
                               "org.apache.zookeeper.server.ZooKeeperServerMain", config],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_for("ZooKeeper serving", lambda: "Mode: standalone" in word(port, "srvr"), 60)
        connect = f"127.0.0.1:{port}"
        subprocess.run([LOADER, connect, "bench", str(args.tasks), str(args.nodes)], check=True,
                       stdout=subprocess.DEVNULL)
        http = free_port()
        node, _ = start_node(tmp, f"[http]\nlisten = \"127.0.0.1:{http}\"\n",
                             ["--zookeeper", connect, "--cluster", "bench",
                              "--node-id", "dashboard-bench", "--state-dir",
                              os.path.join(tmp, "state")])
        base = f"http://127.0.0.1:{http}"
        wait_for("the node serving HTTP", lambda: word(http, "GET /healthz HTTP/1.0\r\n\r\n"), 60)
        status = json.loads(get(base + "/api/status")[1])
        result = {"tasks": len(status["tasks"]), "nodes": len(status["nodes"])}
        # Each phase starts with the snapshot older than SERVE_STALE_FOR (30 s): its first
        # request waits for a read of the whole cluster; later ones are served from the cache
        # (refreshed behind them once it is 2 s old).
        time.sleep(31)
        result["api_status"] = timings(base + "/api/status", args.runs)
        time.sleep(31)
        result["overview"] = timings(base + "/", args.runs)
        return result
    finally:
        stop(node)
        stop(zk)


def idle(args, tmp):
    node = None
    try:
        http = free_port()
        state = os.path.join(tmp, "state")
        node, jobs = start_node(tmp, f"[http]\nlisten = \"127.0.0.1:{http}\"\n",
                                ["--state-dir", state, "--node-id", "idle-bench"])
        for i in range(20):
            with open(os.path.join(jobs, f"task-{i}.toml"), "w") as f:
                f.write(f"schedule = \"{i} 3 * * *\"\ncommand = [\"true\"]\n")
        base = f"http://127.0.0.1:{http}"
        wait_for("the node serving HTTP", lambda: word(http, "GET /healthz HTTP/1.0\r\n\r\n"), 60)
        wait_for("20 tasks loaded",
                 lambda: len(json.loads(get(base + "/api/status")[1])["tasks"]) == 20, 30)
        time.sleep(2)
        result = {}
        for viewer in (False, True):
            cpu, start = cpu_seconds(node.pid), time.monotonic()
            while time.monotonic() - start < args.idle_seconds:
                if viewer:
                    get(base + "/")
                time.sleep(5)
            used = cpu_seconds(node.pid) - cpu
            key = "with_a_viewer_every_5s" if viewer else "no_viewer"
            result[key + "_cpu_percent"] = round(100 * used / (time.monotonic() - start), 3)
        return result
    finally:
        stop(node)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--idle-seconds", type=int, default=60)
    args = parser.parse_args()
    for binary in (ZKCRON, LOADER):
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: cargo build --release --bin zkcron --example status_load")
    result = {"loadavg_before": os.getloadavg()}
    for phase in (large, idle):
        tmp = tempfile.mkdtemp(prefix="zkcron-dashboard-bench-")
        os.chmod(tmp, 0o700)
        try:
            result[phase.__name__] = phase(args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    result.update({"cpu": model, "cores": os.cpu_count(), "loadavg_after": os.getloadavg()})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
