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

`--logs` times `zkcron logs TASK` instead (`--runs` times, a task of the middle of the set):
the CLI finds the newest run's node in the task's history and fire record and that node's
endpoint in its member record, then reads the run's output (`--lines` lines) over HTTP; every
member advertises one local HTTP server (here, in this script) that serves it.

`--ticks` times `zkcron history TASK --ticks` and `--ticks --json` instead (`--runs` times
each): the task of the middle of the set has a full ledger in its fire record (64 entries) and
100 runs in its history; the CLI reads that task's records and the cluster's members and task
set (for its schedule), and prints every tick of the ledger.
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


def output_server(lines):
    """A local HTTP server answering every `/api/runs/<fire id>/output` with a kept output of
    `lines` lines, as a node does; on a thread of its own."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            fire_id = self.path.split("/")[3]
            body = f"zkcron-output 1 {fire_id} node-01\n1796600000000 a 1\n"
            body += "".join(f"1796600000001 o line {i} of the run's output\n" for i in range(lines))
            body += "1796600000002 x exit code 0\n"
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("x-zkcron-run", "ended")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def time_logs(tmp, connect, args):
    """`zkcron logs` of a task of the middle of the set, `--runs` times: its seconds."""
    token = os.path.join(tmp, "read.token")
    with open(token, "w") as f:
        f.write("bench-read-token-0123456789\n")
    os.chmod(token, 0o600)
    config = os.path.join(tmp, "zkcron.toml")
    with open(config, "w") as f:
        f.write(f'[node]\nid = "bench-cli"\n[http]\nlisten = ""\nread_token_file = "{token}"\n')
    task = f"task-{args.tasks // 2:05d}"
    command = [ZKCRON, "logs", task, "--config", config, "--zookeeper", connect,
               "--cluster", "bench", "--state-dir", os.path.join(tmp, "state")]
    load_before = os.getloadavg()
    runs = []
    for _ in range(args.runs):
        elapsed, out = timed(command)
        runs.append(elapsed)
    if out.count("\n") != args.lines:
        raise RuntimeError(f"zkcron logs printed {out.count(chr(10))} lines, not {args.lines}")
    return {
        "tasks": args.tasks, "nodes": args.nodes, "task": task, "lines": args.lines,
        "logs_s": [round(t, 3) for t in runs], "logs_median_s": round(statistics.median(runs), 3),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }


def time_ticks(connect, args):
    """`zkcron history TASK --ticks` (and `--json`) of the task with the full ledger."""
    task = f"task-{args.tasks // 2:05d}"
    command = [ZKCRON, "history", task, "--ticks", "--zookeeper", connect, "--cluster", "bench"]
    load_before = os.getloadavg()
    human = [timed(command)[0] for _ in range(args.runs)]
    runs_json = []
    for _ in range(args.runs):
        elapsed, out = timed(command + ["--json"])
        runs_json.append(elapsed)
    lines = json.loads(out)
    if len(lines) < 164:
        raise RuntimeError(f"history --ticks printed {len(lines)} lines, not 164")
    return {
        "tasks": args.tasks, "nodes": args.nodes, "task": task, "lines": len(lines),
        "ticks_s": [round(t, 3) for t in human],
        "ticks_median_s": round(statistics.median(human), 3),
        "ticks_json_s": [round(t, 3) for t in runs_json],
        "ticks_json_median_s": round(statistics.median(runs_json), 3),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--logs", action="store_true")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--ticks", action="store_true")
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
        env = dict(os.environ)
        server = None
        if args.logs:
            server = output_server(args.lines)
            env["STATUS_LOAD_HTTP"] = f"127.0.0.1:{server.server_address[1]}"
        if args.ticks:
            env["STATUS_LOAD_LEDGER"] = "1"
        subprocess.run([LOADER, connect, "bench", str(args.tasks), str(args.nodes)], check=True,
                       stdout=subprocess.DEVNULL, env=env)
        if args.ticks:
            print(json.dumps(time_ticks(connect, args), indent=1))
            return
        if args.logs:
            try:
                print(json.dumps(time_logs(tmp, connect, args), indent=1))
            finally:
                server.shutdown()
            return
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
