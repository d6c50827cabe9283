#!/usr/bin/env python3
"""Benchmark of `zkcron status` on a large cluster: wall time of the command, end
to end (process start, ZooKeeper session, reads, model, output), on `--tasks` tasks x `--nodes`
nodes.

Usage:  cargo build --release --bin zkcron --example status_load &&
        python3 benches/status.py [--tasks 10000] [--nodes 20] [--runs 7] [--keep]

Starts a standalone ZooKeeper (Debian's /usr/share/java/zookeeper.jar, fresh data dir,
loopback, a free port), writes the cluster's records with `examples/status_load.rs` (members,
one shared task set, a lease, fire record and result per task, a paused task, a drained node),
then runs `zkcron status` and `zkcron status --json` `--runs` times each and prints one JSON
object: every run's seconds, the median, the task and node counts checked in the JSON, and the
machine facts (load average before and after). Stops everything it started, also on failure.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZK_JAR = os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar")
ZKCRON = os.path.join(ROOT, "target", "release", "zkcron")
LOADER = os.path.join(ROOT, "target", "release", "examples", "status_load")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def word(port, w):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(w.encode())
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode()
    except OSError:
        return ""


def wait_for(what, condition, limit):
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def timed(args):
    start = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if out.returncode != 0:
        raise RuntimeError(f"{args} failed ({out.returncode}): {out.stderr}")
    return elapsed, out.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    for binary in (ZKCRON, LOADER):
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: cargo build --release --bin zkcron --example status_load")
    tmp = tempfile.mkdtemp(prefix="zkcron-status-bench-")
    zk = None
    try:
        os.makedirs(os.path.join(tmp, "data"))
        port = free_port()
        config = os.path.join(tmp, "zoo.cfg")
        with open(config, "w") as f:
            f.write(f"tickTime=500\ndataDir={tmp}/data\nclientPort={port}\n"
                    "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=*\n")
        log = open(os.path.join(tmp, "zk.out"), "w")
        zk = subprocess.Popen(["java", "-Xmx1g", "-cp", ZK_JAR,
                               "org.apache.zookeeper.server.ZooKeeperServerMain", config],
                              stdout=log, stderr=subprocess.STDOUT)
        wait_for("ZooKeeper serving", lambda: "Mode: standalone" in word(port, "srvr"), 60)
        connect = f"127.0.0.1:{port}"
        subprocess.run([LOADER, connect, "bench", str(args.tasks), str(args.nodes)], check=True,
                       stdout=subprocess.DEVNULL)
        load_before = os.getloadavg()
        command = [ZKCRON, "status", "--zookeeper", connect, "--cluster", "bench"]
        human = [timed(command)[0] for _ in range(args.runs)]
        runs_json = []
        for _ in range(args.runs):
            elapsed, out = timed(command + ["--json"])
            runs_json.append(elapsed)
        status = json.loads(out)
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                         "?")
        print(json.dumps({
            "tasks": len(status["tasks"]), "nodes": len(status["nodes"]),
            "status_s": [round(t, 3) for t in human],
            "status_median_s": round(statistics.median(human), 3),
            "status_json_s": [round(t, 3) for t in runs_json],
            "status_json_median_s": round(statistics.median(runs_json), 3),
            "cpu": model, "cores": os.cpu_count(),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        }, indent=1))
    finally:
        if zk is not None:
            zk.terminate()
            try:
                zk.wait(timeout=10)
            except subprocess.TimeoutExpired:
                zk.kill()
                zk.wait()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
