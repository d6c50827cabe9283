#!/usr/bin/env python3
"""Benchmark of the dashboard: how long `/` and `/api/status` take on a large cluster, and what
a dashboard left open costs an idle node.

Usage:  cargo build --release --bin zkcron --example status_load &&
        python3 benches/dashboard.py [--tasks 10000] [--nodes 20] [--churn 541] [--requests 20]
            [--idle-seconds 60] [--runs 3] [BUILD ...]

BUILDs are zkcron binaries (default: target/release/zkcron), alternated run for run, so that
an A/B of two builds sees the same machine load; the figures are medians over `--runs`.

Phase `large`: a standalone ZooKeeper with the records of a `--tasks` x `--nodes` cluster
(`examples/status_load.rs`, as benches/status.py), kept writing `--churn` znodes a minute as
the cluster at rest does (claims and results), and one real node of it serving HTTP (its jobs
dir empty, so it leads nothing, and the 21st member). First the node's CPU and RSS before any
request (30 s), and the first request since it started. For each page (`/api/status`, `/`):
after `--cold-seconds` without a request (longer than a build that refreshes only while
watched goes on, and then serves a stale view: no view may be served), the first request
(cold), then `--requests` more, one every 0.5 s (a viewer, or several), timed end to end:
median and maximum; over the last 30 s of each quiet spell, the node's CPU, and its RSS at the
end (a dashboard looked at before, nobody looking now). Then a viewer fetching `/` every 5 s
for 30 s (what the page's script does): the node's CPU meanwhile.

Phase `idle`: a node of the local backend with 20 daily tasks, first with no viewer, then with a
viewer fetching `/` every 5 s, each for `--idle-seconds`: the daemon's CPU time (utime +
stime) over wall time, in percent of one core.

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


def start_node(tmp, config_text, args, binary):
    jobs = os.path.join(tmp, "jobs.d")
    os.makedirs(jobs, exist_ok=True)
    os.chmod(jobs, 0o755)
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write(config_text)
    log = open(os.path.join(tmp, "node.log"), "w")
    node = subprocess.Popen([binary, "run", "--config", config, "--jobs-dir", jobs] + args,
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


def timings(url, requests):
    first = get(url)[0]
    rest = []
    for _ in range(requests):
        time.sleep(0.5)
        rest.append(get(url)[0])
    return {"cold_s": round(first, 3), "median_s": round(statistics.median(rest), 3),
            "max_s": round(max(rest), 3)}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def idle_cpu(node, seconds):
    """The node's CPU in percent of a core over `seconds` without a request."""
    cpu, start = cpu_seconds(node.pid), time.monotonic()
    time.sleep(seconds)
    return round(100 * (cpu_seconds(node.pid) - cpu) / (time.monotonic() - start), 3)


def viewer_cpu(node, url, seconds):
    """The node's CPU in percent of a core while a viewer fetches `url` every 5 s."""
    cpu, start = cpu_seconds(node.pid), time.monotonic()
    while time.monotonic() - start < seconds:
        get(url)
        time.sleep(5)
    return round(100 * (cpu_seconds(node.pid) - cpu) / (time.monotonic() - start), 2)


def large(args, tmp, binary):
    zk = node = loader = None
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
        loader = subprocess.Popen([LOADER, connect, "bench", str(args.tasks), str(args.nodes),
                                   str(args.churn)], stdout=subprocess.PIPE, text=True)
        while loader.stdout.readline().strip() != "churning":
            if loader.poll() is not None:
                raise RuntimeError("status_load ended before it churned")
        http = free_port()
        node, _ = start_node(tmp, f"[http]\nlisten = \"127.0.0.1:{http}\"\n",
                             ["--zookeeper", connect, "--cluster", "bench",
                              "--node-id", "dashboard-bench", "--state-dir",
                              os.path.join(tmp, "state")], binary)
        base = f"http://127.0.0.1:{http}"
        wait_for("the node serving HTTP", lambda: word(http, "GET /healthz HTTP/1.0\r\n\r\n"), 60)
        result = {"unread_cpu_percent": idle_cpu(node, 30), "unread_rss_kib": rss_kib(node.pid)}
        first, body = get(base + "/api/status")
        status = json.loads(body)
        result.update({"tasks": len(status["tasks"]), "nodes": len(status["nodes"]),
                       "first_request_since_start_s": round(first, 3)})
        for key, path in (("api_status", "/api/status"), ("overview", "/")):
            time.sleep(args.cold_seconds - 30)
            result[key + "_quiet_cpu_percent"] = idle_cpu(node, 30)
            result[key + "_quiet_rss_kib"] = rss_kib(node.pid)
            result[key] = timings(base + path, args.requests)
        result["viewer_every_5s_cpu_percent"] = viewer_cpu(node, base + "/", 30)
        return result
    finally:
        stop(node)
        stop(loader)
        stop(zk)


def idle(args, tmp, binary):
    node = None
    try:
        http = free_port()
        state = os.path.join(tmp, "state")
        node, jobs = start_node(tmp, f"[http]\nlisten = \"127.0.0.1:{http}\"\n",
                                ["--state-dir", state, "--node-id", "idle-bench"], binary)
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


def medians(runs):
    """The median of each figure over `runs` (dicts of the same shape)."""
    first = runs[0]
    if isinstance(first, dict):
        return {key: medians([run[key] for run in runs]) for key in first}
    return round(statistics.median(runs), 3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("builds", nargs="*", default=[ZKCRON])
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--cold-seconds", type=int, default=65)
    parser.add_argument("--churn", type=int, default=541)
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--phases", default="large,idle")
    args = parser.parse_args()
    for binary in args.builds + [LOADER]:
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: cargo build --release --bin zkcron --example status_load")
    phases = [{"large": large, "idle": idle}[name] for name in args.phases.split(",")]
    result = {"loadavg_before": os.getloadavg()}
    runs = {build: {phase.__name__: [] for phase in phases} for build in args.builds}
    for _ in range(args.runs):
        for phase in phases:
            for build in args.builds:
                tmp = tempfile.mkdtemp(prefix="zkcron-dashboard-bench-")
                os.chmod(tmp, 0o700)
                try:
                    measured = phase(args, tmp, build)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                runs[build][phase.__name__].append(measured)
                print(json.dumps({"build": build, phase.__name__: measured,
                                  "loadavg": os.getloadavg()}), file=sys.stderr, flush=True)
    result["builds"] = {build: {name: {"median": medians(all_runs), "runs": all_runs}
                                for name, all_runs in by_phase.items()}
                        for build, by_phase in runs.items()}
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    result.update({"cpu": model, "cores": os.cpu_count(), "loadavg_after": os.getloadavg()})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
