#!/usr/bin/env python3
"""Benchmark of the ZooKeeper backend: lateness, takeover, scale and upgrade migration.

Usage:  cargo build --release && python3 benches/cluster.py --phase lateness|takeover|scale|coldstart|join|rolling|all
            [--runs 1] [--seconds N] [--trials 10] [--session-timeout 3s] [--tasks 10000]
            [--nodes 20] [--join-jitter 9s] [--keep] [--tmpdir DIR]

Every phase starts its own standalone ZooKeeper (Debian's /usr/share/java/zookeeper.jar, fresh
data dir, loopback, a free port) and real `zkcron run` processes (release build, JSON logs), each
on a fresh temp dir; everything it started is stopped at the end, also on failure.
  lateness:  3 nodes, 200 tasks every second (`jitter = "1s"`), `--seconds` (default 30) measured.
             Lateness (spawn - due, claim round trip included) from every node's `started` events;
             claim->spawn (the claim's answer -> the child spawned: what a node killed in between
             leaves claimed but not started) from their `claim_to_spawn_us`; duplicate fire ids and
             missing ticks counted.
  takeover:  3 nodes, 30 tasks every second (`catch_up = "all"`, `starting_deadline = "1m"`).
             `--trials` kill -9 and as many SIGTERM of a node that leads tasks, at a random point of
             the second. Per trial: leases_back = kill -> the other nodes hold all 30 leases again
             (their `leases changed` events); first/all fired = kill -> the first/last of the
             victim's tasks started on another node (for SIGTERM this includes waiting for the next
             second's tick, as nothing was missed); then the victim is restarted (same node id) and
             the cluster must settle: leases stable and every task firing again. A trial that fails
             is recorded with what each node was doing, and the remaining trials continue on a
             fresh cluster. Duplicate fire ids and missing ticks are counted over every cluster.
  scale:     `--nodes` (20) zkcron processes sharing one jobs dir of `--tasks` (10,000) hourly tasks
             spread over the hour; time until all leases are held, znode count, ZooKeeper writes per
             minute (Δzxid over `--seconds`, default 60), RSS and CPU per node; and the cold
             start: last node registered -> every lease held by its designated node (computed
             from the member records and the rank spec; see `scale`'s docstring).
  coldstart: `scale` without the idle window (cold start and settle only; `all` skips it).
  join:      2 nodes (1.0.0) with 1,000 tasks `*/10 * * * * *` (`catch_up = "all"`, `jitter =
             "9s"` so that ticks come due throughout the migration; `--join-jitter 0s` for none),
             then a 1.1.0 node joins at a random point of the period; time from its `registered in
             ZooKeeper` until it leads all 1,000 and the old nodes none; double and missing ticks
             from the period before the join to two periods after the migration.
  rolling:   3 nodes (1.0.0) with the `join` tasks, upgraded one at a time to 1.1.0 (SIGTERM, the
             others take its leases, exit, start again with `--node-version 1.1.0`); per step and
             in total, SIGTERM -> every lease on its designated node as ZooKeeper shows it (rank
             spec over the member records); double and missing ticks as in `join`.
With `--runs N` (N > 1), `join` and `rolling` also print a summary: median, min and max of their
times over the runs, and the audit counts summed.
Ticks claimed but skipped by `overlap = "skip"` (logged as such) are counted apart from missing
ones. The CPU used by other processes during each measurement is reported (`other_cores`): on a
shared machine it shows in the latencies. `--tmpdir DIR` puts the temp dirs elsewhere.
Prints one JSON object per phase run (and the machine facts first); docs/BENCHMARKS.md records
the figures.
"""
import argparse
import ctypes
import datetime
import glob
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("ZKCRON_BIN", os.path.join(ROOT, "target", "release", "zkcron"))
ZK_JAR = os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar")
CLK_TCK = os.sysconf("SC_CLK_TCK")
LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
PR_SET_PDEATHSIG = 1


# Log events kept (with every WARN and ERROR and anything about claims); the rest is skipped.
KEEP = {"registered in ZooKeeper", "leases changed", "left the cluster and released all leases",
        "started", "zkcron started", "zkcron stopped", "shutting down: no new ticks will fire",
        "not leading this task any more; tick left to the leader", "no longer firing this task"}


# ` key=value` pairs (values without spaces) at the end of a log message.
TRAILING_FIELDS = re.compile(r"^(.*?)((?: [a-z_]+=[^ =]*)+)$")


def field_value(text):
    """A field rendered in a message, as JSON would have carried it."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


def die_with_parent():
    """In the child: SIGKILL if this script dies, so no zkcron or JVM outlives a crashed run."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ---------------------------------------------------------------- helpers (local.py has copies)

def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def cpu_seconds_with_children(pid):
    """utime + stime + cutime + cstime: a daemon's own CPU and that of the jobs it reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def machine_busy_seconds():
    """CPU seconds spent by the whole machine (all cores) on anything but idle and iowait."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


class CpuMeter:
    """How busy the machine was during a window, split into this benchmark's processes (the
    daemons with their jobs, ZooKeeper, this script) and everything else: the machines these
    figures come from are shared, and other work on them shows in the latencies."""

    def __init__(self, procs):
        self.procs = procs

    def _sample(self):
        pids = [p.pid for p in self.procs.all if p.poll() is None] + [os.getpid()]
        return time.monotonic(), machine_busy_seconds(), {p: cpu_seconds_with_children(p)
                                                          for p in pids}

    def start(self):
        self.t0, self.busy0, self.own0 = self._sample()
        return self

    def stop(self):
        t1, busy1, own1 = self._sample()
        own = sum(own1[p] - self.own0.get(p, 0.0) for p in own1)
        wall = t1 - self.t0
        return {"bench_cores": round(own / wall, 2),
                "other_cores": round(max(0.0, busy1 - self.busy0 - own) / wall, 2),
                "of_cores": os.cpu_count()}


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(values, digits=2):
    if not values:
        return None
    return {"n": len(values), "p50": round(percentile(values, 50), digits),
            "p99": round(percentile(values, 99), digits), "max": round(max(values), digits)}


def machine_facts():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "cpu": model, "cores": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
        "kernel": os.uname().release, "loadavg_at_start": os.getloadavg(),
        "java": java[0] if java else "?", "zookeeper_jar": os.path.realpath(ZK_JAR),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_ts(text):
    """RFC 3339 from tracing-subscriber (`2026-11-22T18:23:50.123456Z`) to Unix seconds."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.datetime.fromisoformat(text).timestamp()


CURRENT = []  # the Processes of the running phase, checked while waiting


def check_processes():
    for procs in CURRENT:
        procs.check()


def wait_for(what, predicate, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        check_processes()
        time.sleep(step)
    raise TimeoutError(f"{what}: not within {timeout} s")


# ---------------------------------------------------------------- processes

class Interference(Exception):
    """A process of the run was stopped by something other than this script."""


class Processes:
    """Everything this run started, so that `finally` can stop all of it."""

    def __init__(self):
        self.all = []

    def spawn(self, argv, **kwargs):
        proc = subprocess.Popen(argv, preexec_fn=die_with_parent, **kwargs)
        proc.expected_exit = False  # set when this script stops it
        self.all.append(proc)
        return proc

    def check(self):
        """Raises if a process exited that this script did not stop: on a shared machine,
        something else killed it, and the run's figures would be wrong."""
        for p in self.all:
            if not p.expected_exit and p.poll() is not None:
                raise Interference(f"pid {p.pid} ({os.path.basename(p.args[0])}"
                                   f"{' ' + p.args[-1] if p.args[0] == 'java' else ''}) exited with"
                                   f" {p.returncode} without being asked to: killed from outside?")

    def stop_all(self):
        for p in self.all:
            p.expected_exit = True
        alive = [p for p in self.all if p.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def leftovers(self, marker):
        """Our pids still alive, and any process whose command line names our temp dir."""
        alive = [p.pid for p in self.all if p.poll() is None]
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
        return alive + [int(x) for x in found.split() if int(x) != os.getpid()]


class ZooKeeper:
    """A standalone ZooKeeper on loopback with its own data dir."""

    def __init__(self, procs, tmp, heap="1g"):
        self.dir = os.path.join(tmp, "zk")
        os.makedirs(os.path.join(self.dir, "data"))
        self.port = free_port()
        config = os.path.join(self.dir, "zoo.cfg")
        with open(config, "w") as f:
            f.write(f"tickTime=500\ndataDir={self.dir}/data\nclientPort={self.port}\n"
                    "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=*\nmaxSessionTimeout=60000\n")
        self.log = open(os.path.join(self.dir, "zk.out"), "w")
        self.proc = procs.spawn(
            ["java", f"-Xmx{heap}", "-cp", ZK_JAR,
             "org.apache.zookeeper.server.ZooKeeperServerMain", config],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("ZooKeeper answering ruok", lambda: self.word("ruok") == "imok", 60, 0.2)
        wait_for("ZooKeeper serving", lambda: "Mode: standalone" in self.word("srvr"), 60, 0.2)

    def word(self, word):
        """A four-letter word; "" if the server does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(word.encode())
                chunks = []
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks).decode()
        except OSError:
            return ""

    def mntr(self):
        out = {}
        for line in self.word("mntr").splitlines():
            key, _, value = line.partition("\t")
            out[key] = value
        return out

    def zxid(self):
        for line in self.word("srvr").splitlines():
            if line.startswith("Zxid:"):
                return int(line.split()[1], 16)
        raise RuntimeError("no Zxid in srvr")

    def ephemerals(self):
        """{session: [ephemeral paths]} from the `dump` four-letter word: who holds which lease
        and member znode, as ZooKeeper sees it (no client library needed)."""
        out, session = {}, None
        for line in self.word("dump").splitlines():
            if line.startswith("0x") and line.rstrip().endswith(":"):
                session = line.strip()[:-1]
                out[session] = []
            elif line.startswith("\t/") and session:
                out[session].append(line.strip())
            elif not line.startswith("\t"):
                session = None
        return out

    def writes_between(self, first_zxid, last_zxid):
        """What the transactions in (first_zxid, last_zxid] were, from the transaction log
        (ZooKeeper's TxnLogToolkit): counts by operation and the zkcron directory it touched.
        A multi that failed is logged as a transaction too (its zxid counts), with errors for
        ops and no paths: counted as `multi failed (N ops)`."""
        counts = {}
        logs = sorted(glob.glob(os.path.join(self.dir, "data", "version-2", "log.*")))
        for log in logs:
            dump = subprocess.run(
                ["java", "-cp", ZK_JAR, "org.apache.zookeeper.server.persistence.TxnLogToolkit",
                 "-d", log], capture_output=True).stdout.decode(errors="replace")
            for line in dump.splitlines():
                m = re.search(r" zxid (0x[0-9a-f]+) (\w+)", line)
                if not m or not first_zxid < int(m.group(1), 16) <= last_zxid:
                    continue
                dirs = sorted(set(re.findall(r"/zkcron/[^/]+/(\w+)", line)))
                key = f'{m.group(2)} {"+".join(dirs) or "-"}'
                if m.group(2) == "multi" and not dirs and "error:" in line:
                    # A failed multi is logged too, each op an error (its code is binary in
                    # the dump): e.g. a take of a lease that exists, 2 ops.
                    key = f'multi failed ({line.count("error:")} ops)'
                counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def connect(self, chroot):
        return f"127.0.0.1:{self.port}{chroot}"


class Node:
    """One `zkcron run` process; its JSON log is parsed incrementally into `events`."""

    def __init__(self, procs, tmp, zk_connect, node_id, jobs_dir, version="1.0.0",
                 session_timeout="3s", cluster="bench", incarnation=0):
        self.id = node_id
        self.version = version
        base = os.path.join(tmp, node_id)
        os.makedirs(base, exist_ok=True)
        self.log_path = os.path.join(base, f"log-{incarnation}.jsonl")
        config = os.path.join(base, "zkcron.toml")
        with open(config, "w") as f:
            f.write(f'[coordination.zookeeper]\nsession_timeout = "{session_timeout}"\n'
                    '[log]\nformat = "json"\n'
                    # Many nodes on one host: no HTTP endpoint (they would all want port 9464).
                    '[http]\nlisten = ""\n')
        # `zkcron::daemon::runs=debug` logs "claimed ahead of its instant": the audit tells a
        # tick claimed by a node killed before its instant from a lost one.
        env = dict(os.environ, ZKCRON_LOG="info,zkcron::job=warn,zkcron::daemon::runs=debug")
        self.log = open(self.log_path, "w")
        self.t_start = time.time()
        self.proc = procs.spawn(
            [BINARY, "run", "--config", config, "--jobs-dir", jobs_dir,
             "--state-dir", os.path.join(base, "state"), "--zookeeper", zk_connect,
             "--cluster", cluster, "--node-id", node_id, "--node-version", version],
            stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.events = []
        self.lease_changes = []
        self.last_fire = {}  # task -> newest tick this node started
        self.last_fire_ts = None
        self._reader = open(self.log_path)
        self._partial = ""

    def poll(self):
        """Reads new complete log lines; returns the new events."""
        data = self._partial + self._reader.read()
        lines = data.split("\n")
        self._partial = lines.pop()
        new = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            fields = event.get("fields")
            if isinstance(fields, dict):  # not flattened: lift the fields
                event = {**event, **fields}
            message = event.get("message", "")
            trailing = TRAILING_FIELDS.match(message)
            if trailing:  # the node's reports render their fields as ` key=value` in the text
                event["message"] = trailing.group(1)
                for pair in trailing.group(2).split():
                    key, _, value = pair.partition("=")
                    event.setdefault(key, field_value(value))
            if "lateness_us" in event:  # integer microseconds; older binaries logged lateness_ms
                event["lateness_ms"] = int(event["lateness_us"]) / 1000
            message = event.get("message", "")
            if not (message in KEEP or "claim" in message
                    or event.get("level") in ("WARN", "ERROR")):
                continue
            event["ts"] = parse_ts(event["timestamp"]) if "timestamp" in event else time.time()
            event["_node"] = self.id
            if message == "leases changed":
                self.lease_changes.append(event)
            elif message == "started" and "fire_id" in event:
                task, tick = fire_tick(event["fire_id"])
                self.last_fire[task] = max(tick, self.last_fire.get(task, 0))
                self.last_fire_ts = event["ts"]
            new.append(event)
        self.events.extend(new)
        return new

    def find(self, message):
        self.poll()
        return [e for e in self.events if e.get("message") == message]

    def leading(self):
        """The `leading` of the latest `leases changed` event while not paused, else None."""
        self.poll()
        if not self.lease_changes or self.lease_changes[-1].get("paused"):
            return None
        return self.lease_changes[-1]["leading"]

    def alive(self):
        return self.proc.poll() is None

    def term(self):
        self.proc.expected_exit = True
        self.proc.send_signal(signal.SIGTERM)

    def kill9(self):
        self.proc.expected_exit = True
        self.killed = True
        self.proc.kill()

    def wait(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def write_tasks(jobs, total, schedule_of, extra=""):
    os.makedirs(jobs, exist_ok=True)
    for i in range(total):
        with open(os.path.join(jobs, f"task-{i:05d}.toml"), "w") as f:
            f.write(f'schedule = "{schedule_of(i)}"\ncommand = ["true"]\n{extra}')


def fires(nodes_or_events):
    """`started` events (first attempts) from a list of Node objects or events."""
    out = []
    for item in nodes_or_events:
        events = item.events if isinstance(item, Node) else [item]
        for e in events:
            if e.get("message") == "started" and e.get("attempt", 1) == 1 and "fire_id" in e:
                out.append(e)
    return out


def fire_tick(fire_id):
    task, _, unix = fire_id.rpartition("@")
    return task, int(unix)


def overlap_skips(nodes):
    """Fire ids claimed but not run because the task's previous run was still live
    (`overlap = "skip"`): consumed by policy, not lost."""
    return {e["fire_id"] for n in nodes for e in n.events
            if e.get("message", "").startswith("skipped: the previous run is still going")
            and "fire_id" in e}


def claimed_by_killed_nodes(nodes):
    """Fire ids claimed ahead of their instant by a node killed with SIGKILL afterwards: with
    the default `on_node_loss = "skip"` such a tick is not run by anyone, by design (docs/guarantee.md: a
    node that dies between the claim and the instant, at most 200 ms). Started ones are no
    concern of the audit's (it counts what never started)."""
    return {e["fire_id"] for n in nodes if getattr(n, "killed", False) for e in n.events
            if e.get("message") == "claimed ahead of its instant" and "fire_id" in e}


def audit(started, tasks, first_tick, last_tick, period=1, skipped=(), killed_claims=()):
    """Duplicates (a fire id started more than once, anywhere) and missing ticks in
    [first_tick, last_tick] for every task (ticks on multiples of `period`). Ticks skipped by
    the overlap policy (`skipped`, logged as such) and ticks claimed ahead by a node killed
    before their instant (`killed_claims`, logged by it) are counted apart, not as missing."""
    seen = {}
    for e in started:
        seen.setdefault(e["fire_id"], []).append(e)
    duplicates = {fid: [(e["_node"], e["timestamp"]) for e in evs]
                  for fid, evs in seen.items() if len(evs) > 1}
    missing, skips, killed = [], 0, []
    start = math.ceil(first_tick / period) * period
    for task in tasks:
        for t in range(start, last_tick + 1, period):
            fire_id = f"{task}@{t}"
            if fire_id in seen:
                continue
            if fire_id in skipped:
                skips += 1
            elif fire_id in killed_claims:
                killed.append(fire_id)
            else:
                missing.append(fire_id)
    expected = len(tasks) * len(range(start, last_tick + 1, period))
    return {"fire_ids_checked": expected, "duplicates": len(duplicates),
            "duplicate_examples": dict(list(duplicates.items())[:5]),
            "skipped_by_overlap_policy": skips,
            "claimed_by_a_killed_node": len(killed), "claimed_by_a_killed_node_examples": killed[:10],
            "missing": len(missing), "missing_examples": missing[:10]}


class Run:
    """A phase's temp dir, ZooKeeper and processes; `with Run(...)` stops all of them."""

    def __init__(self, name, keep=False, tmpdir=None):
        self.name = name
        self.keep = keep
        self.tmpdir = tmpdir

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix=f"zkcron-bench-{self.name}-", dir=self.tmpdir)
        self.procs = Processes()
        CURRENT[:] = [self.procs]
        self.zk = ZooKeeper(self.procs, self.tmp)
        return self

    def __exit__(self, *exc):
        CURRENT.clear()
        self.procs.stop_all()
        self.orphans = self.procs.leftovers(self.tmp)
        if self.orphans:
            print(f"WARNING: processes left over: {self.orphans}", file=sys.stderr)
        if not self.keep and exc[0] is None:
            subprocess.run(["rm", "-rf", self.tmp])
        elif exc[0] is not None:
            print(f"logs kept in {self.tmp}", file=sys.stderr)
        return False


class SettleError(Exception):
    """The cluster did not reach the expected state; `details` says what each node was doing."""

    def __init__(self, what, details):
        super().__init__(f"{what}: {json.dumps(details)[:3000]}")
        self.what = what
        self.details = details


def stale_tasks(nodes, names, since_tick):
    """Tasks none of `nodes` started a tick >= since_tick of."""
    newest = {}
    for n in nodes:
        for task, tick in n.last_fire.items():
            newest[task] = max(tick, newest.get(task, 0))
    return [t for t in names if newest.get(t, 0) < since_tick]


def flaps(node):
    """Leases taken and given back within 50 ms (`leading` up, then straight back down)."""
    ch = node.lease_changes
    return sum(1 for a, b, c in zip(ch, ch[1:], ch[2:])
               if b["leading"] > a["leading"] and c["leading"] < b["leading"]
               and c["ts"] - b["ts"] < 0.05)


def diagnose(nodes, names=None, since_tick=None):
    """What every node is doing: for reports of a cluster that did not settle."""
    now = time.time()
    out = {"nodes": {}}
    for n in nodes:
        n.poll()
        out["nodes"][n.id] = {
            "alive": n.alive(), "pid": n.proc.pid, "log": n.log_path,
            "leading": n.leading(),
            "last_lease_change_age_s":
                round(now - n.lease_changes[-1]["ts"], 1) if n.lease_changes else None,
            "last_fire_age_s": round(now - n.last_fire_ts, 1) if n.last_fire_ts else None,
            "lease_deleted_by_someone_else":
                len(n.find("this node's lease was deleted by someone else")),
            "take_release_flaps": flaps(n),
        }
    if names and since_tick is not None:
        stale = stale_tasks(nodes, names, since_tick)
        out["tasks_not_fired"] = {"since_tick": since_tick, "count": len(stale),
                                  "examples": stale[:10]}
    return out


def wait_settled(nodes, total, timeout, quiet=1.5, each=True, live=None):
    """Until every node reported its leases (not paused), together they lead `total` tasks (each
    at least one if `each`), no lease changed for `quiet` s and, if `live` (names of tasks that
    fire every second) is given, each of those tasks fired a tick that came due after the last
    lease change: holding leases is not enough, the tasks must be firing. Returns the time of the
    last lease change; raises SettleError with what each node was doing."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        leading = [n.leading() for n in nodes]
        if None not in leading and sum(leading) == total and (not each or min(leading) > 0):
            last = max(n.lease_changes[-1]["ts"] for n in nodes)
            if time.time() - last >= quiet and not (
                    live and stale_tasks(nodes, live, math.ceil(last))):
                return last
        check_processes()
        time.sleep(0.1)
    raise SettleError(f"the cluster did not settle within {timeout} s",
                      diagnose(nodes, live, math.ceil(last) if live and last else None))


def anomalies(nodes):
    """WARN/ERROR messages by text with counts (claims refused, sessions lost, ...), and how
    often a node took leases and gave them straight back."""
    counts = {}
    for n in nodes:
        for e in n.events:
            if e.get("level") in ("WARN", "ERROR") or (
                    "claim" in e.get("message", "") and e.get("level") != "DEBUG"):
                key = f'{e.get("level")}: {e.get("message")}'
                counts[key] = counts.get(key, 0) + 1
    flapped = sum(flaps(n) for n in nodes)
    if flapped:
        counts["leases taken and given back within 50 ms"] = flapped
    return counts


def sleep_until(unix):
    while time.time() < unix:
        check_processes()
        time.sleep(min(0.5, max(0.0, unix - time.time())))
    check_processes()


def humantime_s(text):
    for unit, factor in (("ms", 0.001), ("s", 1), ("m", 60)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def task_names(count):
    return [f"task-{i:05d}" for i in range(count)]


# ---------------------------------------------------------------- phases

def lateness(args):
    tasks, n_nodes = 200, 3
    names = task_names(tasks)
    with Run("lateness", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        write_tasks(jobs, tasks, lambda i: "* * * * * *",
                    f'jitter = "{args.jitter}"\ncatch_up = "all"\nstarting_deadline = "1m"\n')
        connect = run.zk.connect("/lateness")
        t0 = time.time()
        nodes = [Node(run.procs, run.tmp, connect, f"n{i + 1}", jobs,
                      session_timeout=args.session_timeout) for i in range(n_nodes)]
        result = {"phase": "lateness", "nodes": n_nodes, "tasks_every_second": tasks,
                  "jitter": args.jitter, "seconds": args.seconds}
        try:
            settled = wait_settled(nodes, tasks, 120, live=names)
        except SettleError as e:
            result.update(failed=e.what, details=e.details, warnings=anomalies(nodes))
            return result
        time.sleep(2)
        first = math.ceil(time.time()) + 1
        last = first + args.seconds - 1
        sleep_until(first)
        z0, load0 = (time.time(), run.zk.zxid()), os.getloadavg()
        run.zk.word("srst")  # reset the server's statistics: request latency, fsync times
        m0 = run.zk.mntr()
        meter = CpuMeter(run.procs).start()
        sleep_until(last + 1)
        z1 = (time.time(), run.zk.zxid())
        m1 = run.zk.mntr()
        cpu = meter.stop()
        fsyncs = int(m1["zk_cnt_fsynctime"]) - int(m0["zk_cnt_fsynctime"])
        latency = next((line.split(":", 1)[1].strip() for line in run.zk.word("srvr").splitlines()
                        if line.startswith("Latency min/avg/max")), "?")
        zk_server = {
            # ZooKeeper's own view of its requests in the window (arrival -> reply, fsync
            # included), and its transaction log syncs.
            "request_latency_ms_min_avg_max": latency,
            "fsyncs_per_s": round(fsyncs / (z1[0] - z0[0]), 1),
            "fsync_ms_avg": round((int(m1["zk_sum_fsynctime"]) - int(m0["zk_sum_fsynctime"]))
                                  / max(1, fsyncs), 2),
        }
        sleep_until(last + 1 + 1 + 2)  # the last tick's jitter (< 1 s), then a margin
        rss = {n.id: round(rss_kib(n.proc.pid) / 1024, 1) for n in nodes}
        for n in nodes:
            n.poll()
        started = fires(nodes)
        window = [e for e in started if first <= fire_tick(e["fire_id"])[1] <= last]
        late = [float(e["lateness_ms"]) for e in window if "lateness_ms" in e]
        claim_to_spawn = [int(e["claim_to_spawn_us"]) for e in window if "claim_to_spawn_us" in e]
        changes = [e for n in nodes for e in n.lease_changes if e["ts"] >= first]
        result.update({
            "settle_s": round(settled - t0, 2),
            "spawns": len(window), "spawns_expected": tasks * args.seconds,
            "spawns_per_node": {n.id: sum(1 for e in window if e["_node"] == n.id) for n in nodes},
            "lateness_ms": summary(late),
            "lateness_over_10ms": sum(1 for x in late if x > 10),
            "claim_to_spawn_us": summary(claim_to_spawn, digits=0),
            "lease_changes_during_window": len(changes),
            "zk_writes_per_s": round((z1[1] - z0[1]) / (z1[0] - z0[0]), 1),
            "zk_server": zk_server,
            "loadavg_1m_at_window_start": round(load0[0], 2),
            "cpu_during_window": cpu,
            "rss_mib": rss,
            "audit": audit(started, names, first, last, skipped=overlap_skips(nodes)),
            "warnings": anomalies(nodes),
        })
        return result


def takeover(args):
    """Trials of kill -9 and SIGTERM on 3-node clusters. A trial that fails (its tasks are not
    taken over, or the restarted node does not settle and fire) is recorded with what each node
    was doing, and the remaining trials run on a fresh cluster."""
    names = task_names(30)
    timeout_s = humantime_s(args.session_timeout)
    todo = [kind for kind in ("kill", "term") for _ in range(args.trials)]
    trials, clusters = [], []
    rng = random.Random(args.seed)
    while todo and len(clusters) < args.max_clusters:
        clusters.append(takeover_cluster(args, names, todo, trials, rng, timeout_s))
        print(json.dumps({"cluster": {k: v for k, v in clusters[-1].items()
                                      if k != "warnings"}}), file=sys.stderr, flush=True)
    result = {"phase": "takeover", "nodes": 3, "tasks_every_second": len(names),
              "session_timeout": args.session_timeout, "trials_per_kind": args.trials}
    result.update(summarize_takeover(trials, clusters))
    result["trials"] = trials
    result["clusters"] = clusters
    return result


def summarize_takeover(trials, clusters):
    """Takeover figures over every trial whose takeover completed (a restart that failed
    afterwards does not change how the takeover went); failures counted per stage."""
    out = {"clusters_used": len(clusters)}
    for kind in ("kill", "term"):
        mine = [t for t in trials if t["kind"] == kind]
        measured = [t for t in mine if "first_s" in t]
        out[kind] = {"trials": len(mine), "takeover_measured": len(measured),
                     "takeover_failed": sum(1 for t in mine if "failed" in t),
                     "restart_failed": sum(1 for t in mine if "restart_failed" in t)}
        for key, label in (("lease_s", "leases_back_s"), ("first_s", "first_fire_s"),
                           ("all_s", "all_tasks_fired_s"),
                           ("first_fires_late_ms_max", "first_fires_lateness_ms_max")):
            values = [t[key] for t in measured if t.get(key) is not None]
            if values:
                out[kind][label] = {"median": round(statistics.median(values), 3),
                                    "min": min(values), "max": max(values)}
    audits = [c for c in clusters if c.get("audit")]
    out["audit"] = {
        "fire_ids_checked": sum(c["audit"]["fire_ids_checked"] for c in audits),
        "duplicates": sum(c["audit"]["duplicates"] for c in audits),
        "skipped_by_overlap_policy":
            sum(c["audit"].get("skipped_by_overlap_policy", 0) for c in audits),
        "claimed_by_a_killed_node":
            sum(c["audit"].get("claimed_by_a_killed_node", 0) for c in audits),
        "missing_before_any_failure": sum(c["audit"]["missing"] for c in audits),
        "missing_after_a_failure":
            sum(c.get("audit_after_failure", {}).get("missing", 0) for c in audits),
        "caught_up_fires": sum(c.get("caught_up_fires", 0) for c in audits),
    }
    return out


def leases_back(others, total, t_kill):
    """When `others` together held all `total` leases again after t_kill, from their `leases
    changed` events (None if they never did)."""
    latest, changes = {}, []
    for n in others:
        n.poll()
        for e in n.lease_changes:
            lead = 0 if e.get("paused") else e["leading"]
            if e["ts"] <= t_kill:
                latest[n.id] = lead
            else:
                changes.append((e["ts"], n.id, lead))
    for ts, node_id, lead in sorted(changes):
        latest[node_id] = lead
        if sum(latest.values()) == total:
            return ts
    return None


def takeover_cluster(args, names, todo, trials, rng, timeout_s):
    cluster = {"trials": 0, "failure": None, "failure_from": None}
    with Run("takeover", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        write_tasks(jobs, len(names), lambda i: "* * * * * *",
                    'catch_up = "all"\nstarting_deadline = "1m"\n')
        connect = run.zk.connect("/takeover")
        ids = ["n1", "n2", "n3"]
        incarnations = {i: 0 for i in ids}

        def start(node_id):
            return Node(run.procs, run.tmp, connect, node_id, jobs,
                        session_timeout=args.session_timeout, incarnation=incarnations[node_id])

        current = {i: start(i) for i in ids}
        everyone = list(current.values())
        meter = CpuMeter(run.procs).start()
        first_tick, trial = None, None
        try:
            wait_settled(list(current.values()), len(names), 60, live=names)
            first_tick = math.ceil(time.time()) + 1
            while todo:
                kind = todo[0]
                time.sleep(rng.uniform(0, 1))  # kill at a random point of the second
                for n in everyone:
                    n.poll()
                # The victim: the next node in turn that leads something; its tasks are those
                # it fired last (every task fires every second, by its leader).
                candidates = [ids[(len(trials) + k) % 3] for k in range(3)]
                victim_id = next(i for i in candidates if (current[i].leading() or 0) > 0)
                victim = current[victim_id]
                last_fire = {}
                for e in sorted(fires(everyone), key=lambda e: e["ts"]):
                    last_fire[e["task"]] = e["_node"]
                led = sorted(t for t, node in last_fire.items() if node == victim_id)
                trial = {"kind": kind, "victim": victim_id, "led": len(led)}
                t_kill = time.time()
                if kind == "kill":
                    victim.kill9()
                else:
                    victim.term()
                firsts = {}
                others = [n for n in everyone if n is not victim]
                seen = {id(n): len(n.events) for n in others}

                def taken():
                    for n in others:
                        n.poll()
                        for e in fires(n.events[seen[id(n)]:]):
                            if (e["task"] in led and e["ts"] > t_kill
                                    and e["ts"] < firsts.get(e["task"], {"ts": math.inf})["ts"]):
                                firsts[e["task"]] = e
                        seen[id(n)] = len(n.events)
                    return len(firsts) == len(led)

                try:
                    wait_for("takeover", taken, timeout_s + 15, 0.05)
                except TimeoutError:
                    details = diagnose([n for n in current.values() if n is not victim])
                    details["not_taken_over"] = sorted(set(led) - set(firsts))
                    raise SettleError(
                        f"the victim's tasks were not all taken over within {timeout_s + 15} s",
                        details)
                back = leases_back([n for n in current.values() if n is not victim],
                                   len(names), t_kill)
                trial.update(
                    lease_s=round(back - t_kill, 3) if back else None,
                    first_s=round(min(e["ts"] for e in firsts.values()) - t_kill, 3),
                    all_s=round(max(e["ts"] for e in firsts.values()) - t_kill, 3),
                    first_fires_late_ms_max=round(
                        max(float(e.get("lateness_ms", 0)) for e in firsts.values()), 1))
                victim.wait()
                victim.poll()
                released = victim.find("left the cluster and released all leases")
                trial["release_took_ms"] = released[0].get("took_ms") if released else None
                # Run on two nodes for a while, so that the audit up to the restart covers the
                # takeover and the catch-up completely.
                sleep_until(time.time() + args.restart_delay)
                # Restart the victim: a fresh process with the same node id.
                incarnations[victim_id] += 1
                t_restart = time.time()
                current[victim_id] = start(victim_id)
                everyone.append(current[victim_id])
                trial["stage"] = "restart"
                cluster["failure_from"] = t_restart
                try:
                    registered = wait_for(
                        "restarted node registered",
                        lambda: current[victim_id].find("registered in ZooKeeper"), 60, 0.05)
                except TimeoutError:
                    raise SettleError("the restarted node did not register within 60 s",
                                      diagnose(list(current.values())))
                settled = wait_settled(list(current.values()), len(names), 30, live=names)
                cluster["failure_from"] = None
                del trial["stage"]
                trial.update(restart_registered_s=round(registered[0]["ts"] - t_restart, 3),
                             restart_settled_s=round(settled - t_restart, 3))
                trials.append(trial)
                todo.pop(0)
                cluster["trials"] += 1
                trial = None
                print(json.dumps({"trial": trials[-1]}), file=sys.stderr, flush=True)
        except SettleError as e:
            cluster["failure"] = {"what": e.what, "details": e.details}
            if trial is not None:
                if trial.pop("stage", None) == "restart":
                    trial["restart_failed"] = e.what
                else:
                    trial["failed"] = e.what
                    cluster["failure_from"] = t_kill
                trials.append(trial)
                todo.pop(0)
                cluster["trials"] += 1
                print(json.dumps({"trial": trial}), file=sys.stderr, flush=True)
        if first_tick is not None:
            time.sleep(3)
            last_tick = math.floor(time.time()) - 2
            for n in everyone:
                n.poll()
            started = fires(everyone)
            skipped = overlap_skips(everyone)
            killed_claims = claimed_by_killed_nodes(everyone)
            # Ticks up to the failure (if any) and after it are audited apart: the first say
            # whether takeovers lost or doubled ticks, the second what the failure cost.
            split = cluster.get("failure_from")
            until = min(last_tick, math.floor(split) - 1) if split else last_tick
            cluster["audit"] = audit(started, names, first_tick, until, skipped=skipped,
                                     killed_claims=killed_claims)
            if split:
                cluster["audit_after_failure"] = audit(started, names, until + 1, last_tick,
                                                       skipped=skipped,
                                                       killed_claims=killed_claims)
            cluster["caught_up_fires"] = sum(
                1 for e in started if first_tick <= fire_tick(e["fire_id"])[1] <= last_tick
                and e["ts"] - fire_tick(e["fire_id"])[1] > 1.5)
            # For comparison with the first fires after a takeover: all fires that were on time
            # (the 30 tasks fire at the same instant every second, without jitter).
            cluster["lateness_ms_on_time_fires"] = summary(
                [float(e["lateness_ms"]) for e in started
                 if "lateness_ms" in e and float(e["lateness_ms"]) < 1000])
        cluster["cpu"] = meter.stop()
        cluster["warnings"] = anomalies(everyone)
        cluster["tmp"] = run.tmp if (args.keep or cluster["failure"]) else None
        run.keep = run.keep or bool(cluster["failure"])  # keep the logs of a failed cluster
    return cluster



# ---------------------------------------------------------------- who is designated (cold start)

# XXH3-64 with a seed, for inputs of 9 to 16 bytes only (the bench's task names, `task-00000`):
# the rank specification's score (src/coord/rank.rs), re-implemented from the XXH3 spec so that
# this script can say which node is designated for each task. Checked against the value that
# rank.rs pins (`score(42, "nightly-report")`) every time it is used.
XXH_MASK = (1 << 64) - 1
XXH_SECRET = bytes([  # the first 56 bytes of XXH3's default secret
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e])
PINNED_NIGHTLY_REPORT = 7_067_923_655_005_833_206


def _le64(b, i):
    return int.from_bytes(b[i:i + 8], "little")


def rank_score(seed, task):
    """`rank::score(seed, task)`: XXH3_64bits_withSeed(utf8(task), seed), 9-16 byte names."""
    data = task.encode()
    if not 9 <= len(data) <= 16:
        raise ValueError(f"rank_score only implements 9-16 byte names, not {task!r}")
    flip1 = ((_le64(XXH_SECRET, 24) ^ _le64(XXH_SECRET, 32)) + seed) & XXH_MASK
    flip2 = ((_le64(XXH_SECRET, 40) ^ _le64(XXH_SECRET, 48)) - seed) & XXH_MASK
    lo = _le64(data, 0) ^ flip1
    hi = _le64(data, len(data) - 8) ^ flip2
    product = lo * hi
    acc = (len(data) + int.from_bytes(lo.to_bytes(8, "little"), "big") + hi
           + ((product & XXH_MASK) ^ (product >> 64))) & XXH_MASK
    acc ^= acc >> 37
    acc = (acc * 0x165667919E3779F9) & XXH_MASK
    return acc ^ (acc >> 32)


class ZkReader:
    """A minimal read-only ZooKeeper client (jute over TCP: connect, getChildren, getData),
    enough to read the member records (their seeds) without a client library."""

    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.xid = 0
        # ConnectRequest: protocol 0, last zxid 0, timeout 10 s, session 0, 16-byte password,
        # not read-only.
        self._send(struct.pack(">iqiq", 0, 0, 10000, 0) + struct.pack(">i", 16) + b"\0" * 17)
        self._recv()

    def _send(self, body):
        self.s.sendall(struct.pack(">i", len(body)) + body)

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise OSError("ZooKeeper closed the connection")
            out += chunk
        return out

    def _recv(self):
        (n,) = struct.unpack(">i", self._exact(4))
        return self._exact(n)

    def _call(self, op, path):
        self.xid += 1
        p = path.encode()
        self._send(struct.pack(">ii", self.xid, op) + struct.pack(">i", len(p)) + p + b"\0")
        while True:
            reply = self._recv()
            xid, _zxid, err = struct.unpack(">iqi", reply[:16])
            if xid == self.xid:
                break
        if err:
            raise OSError(f"ZooKeeper error {err} on {path}")
        return reply[16:]

    def children(self, path):
        body = self._call(8, path)
        (count,) = struct.unpack(">i", body[:4])
        out, i = [], 4
        for _ in range(count):
            (n,) = struct.unpack(">i", body[i:i + 4])
            out.append(body[i + 4:i + 4 + n].decode())
            i += 4 + n
        return out

    def data(self, path):
        """(data, ephemeral owner session)."""
        body = self._call(4, path)
        (n,) = struct.unpack(">i", body[:4])
        stat = body[4 + max(n, 0):]
        (owner,) = struct.unpack(">q", stat[44:52])  # czxid mzxid ctime mtime ver cver aver
        return body[4:4 + max(n, 0)], owner

    def close(self):
        try:
            self._send(struct.pack(">ii", self.xid + 1, -11))
        finally:
            self.s.close()


def read_members(zk, chroot):
    """{node id: member record} of the ephemeral member znodes."""
    reader = ZkReader(zk.port)
    try:
        base = f"{chroot}/zkcron/bench/members"
        out = {}
        for node_id in reader.children(base):
            try:
                data, owner = reader.data(f"{base}/{node_id}")
            except OSError as e:
                if "error -101 " not in str(e):  # NoNode: it left (session expired) meanwhile
                    raise
                continue
            if owner:
                out[node_id] = json.loads(data)
        return out
    finally:
        reader.close()


def release_key(release):
    """Semver precedence of a plain `MAJOR.MINOR.PATCH` release (the bench uses no others)."""
    parts = release.split("+")[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"release_key only ranks MAJOR.MINOR.PATCH releases, not {release!r}")
    return tuple(int(p) for p in parts)


def designated_holders(members, names):
    """{task: designated node id} by the rank spec (release, then score, then id), when every
    member may lead and defines the same task set (one digest, `len(names)` tasks, and the
    bench writes no `version_req`); else (None, why)."""
    if rank_score(42, "nightly-report") != PINNED_NIGHTLY_REPORT:
        raise AssertionError("rank_score disagrees with rank.rs's pinned value")
    sets = {m["taskset"]["digest"] for m in members.values()}
    if len(sets) != 1 or any(m["taskset"]["count"] != len(names) for m in members.values()):
        return None, f"members define different task sets: {sorted(sets)}"
    if not all(m.get("leads", True) for m in members.values()):
        return None, "a member announced it may not lead"
    # Newest release first (only the newest can be designated), then score, then id.
    newest = max(release_key(m["release"]) for m in members.values())
    seeds = {node_id: int(m["seed"], 16) for node_id, m in members.items()
             if release_key(m["release"]) == newest}
    out = {}
    for task in names:
        out[task] = min(seeds, key=lambda node_id: (-rank_score(seeds[node_id], task), node_id))
    return out, None


def lease_map(zk, chroot):
    """({task: holder's node id}, number of member znodes), from ZooKeeper's `dump`."""
    holder_of, members = {}, 0
    members_dir, leases_dir = f"{chroot}/zkcron/bench/members/", f"{chroot}/zkcron/bench/leases/"
    for paths in zk.ephemerals().values():
        node = next((p.rsplit("/", 1)[1] for p in paths if p.startswith(members_dir)), None)
        members += node is not None
        for p in paths:
            if p.startswith(leases_dir):
                holder_of[p[len(leases_dir):]] = node or "?"
    return holder_of, members


def lease_holders(zk, chroot):
    """{node id: leases held} and the number of member znodes, from ZooKeeper's `dump`."""
    holder_of, members = lease_map(zk, chroot)
    holders = {}
    for node in holder_of.values():
        holders[node] = holders.get(node, 0) + 1
    return holders, members


def scale(args, window=True):
    """Settled = ZooKeeper holds a lease for every task and who holds how many has not changed
    for 10 s (read with `dump`, so a node that stopped working cannot make it look settled).
    The window is measured even if the cluster never settles, and says so.

    Cold start, also measured here: from the LAST node's `registered in ZooKeeper`
    until every lease is held by its DESIGNATED node. Once every node has registered, the script
    reads the member records from ZooKeeper (their seeds; `ZkReader`) and computes the designated
    node of each task by the rank spec of src/coord/rank.rs (`rank_score`, checked against the
    value rank.rs pins); it then polls `dump` every 0.2 s for who holds which lease (so the
    figure is exact to about one poll) and takes the first poll where every task's lease is held
    by its designated node. This is an outside check, independent of what the nodes believe; the
    member records are read again at the end, and the figure is withheld (with the reason) if the
    member set or a seed changed meanwhile, or if the members do not all define the same tasks
    and may lead (the ranking the script computes would not apply). `coldstart` is this phase
    without the idle window."""
    tasks, n_nodes = args.tasks, args.nodes
    names = task_names(tasks)
    chroot = "/scale"
    with Run("scale", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        write_tasks(jobs, tasks, lambda i: f"{i % 60} * * * *")
        connect = run.zk.connect(chroot)
        znodes_empty = int(run.zk.mntr()["zk_znode_count"])
        t0 = time.time()
        nodes = [Node(run.procs, run.tmp, connect, f"n{i + 1:02d}", jobs,
                      session_timeout=args.session_timeout) for i in range(n_nodes)]
        result = {"phase": "scale" if window else "coldstart", "tasks": tasks, "nodes": n_nodes}
        registered, last_registration = None, None
        designated, members_seen, not_designated_why = None, None, None
        at_designated, covers, snapshots = None, 0, []
        cpu_samples = []  # (time, the nodes' CPU seconds so far), at each poll
        settled, stable_since, previous = None, None, None
        deadline = time.monotonic() + args.deadline
        while time.monotonic() < deadline:
            check_processes()
            if registered is None:
                firsts = [n.find("registered in ZooKeeper") for n in nodes]
                if all(firsts):
                    registered = time.time()
                    last_registration = max(f[0]["ts"] for f in firsts)
            holder_of, members = lease_map(run.zk, chroot)
            now = time.time()
            cpu_samples.append((now, sum(cpu_seconds(n.proc.pid) for n in nodes),
                                cpu_seconds(run.zk.proc.pid)))
            if registered is not None and members_seen is None:
                # Ranking 10,000 tasks takes this script seconds: keep the polls made meanwhile
                # and compare them afterwards, so the figure does not include that time.
                snapshots.append((now, holder_of))
                members_seen = read_members(run.zk, chroot)
                if len(members_seen) == n_nodes:
                    designated, not_designated_why = designated_holders(members_seen, names)
                    if designated is not None:
                        at_designated = next((t for t, h in snapshots if h == designated), None)
                    snapshots = []
                else:
                    members_seen = None  # a member znode not visible yet: read again
            elif at_designated is None and designated is not None and holder_of == designated:
                at_designated = now
            holders = {}
            for node in holder_of.values():
                holders[node] = holders.get(node, 0) + 1
            if sum(holders.values()) == tasks and holders == previous:
                if now - stable_since >= 10 and (at_designated or designated is None):
                    settled = stable_since
                    break
            else:
                stable_since = now
            previous = holders
            time.sleep(0.2)
        for n in nodes:
            n.poll()
            covers += len(n.find("took the lease as cover: its designated node left it vacant"))
        members_end = read_members(run.zk, chroot)
        seeds = lambda ms: {k: (m["seed"], m["release"]) for k, m in (ms or {}).items()}
        if members_seen is not None and seeds(members_end) != seeds(members_seen):
            designated, not_designated_why = None, "the member set or a seed changed during the run"
        result.update({
            "last_registration_s": round(last_registration - t0, 2) if last_registration else None,
            "cold_start_s": round(at_designated - last_registration, 2)
            if at_designated and designated is not None else None,
            "cold_start_not_measured": not_designated_why
            or (None if at_designated else "never every lease on its designated node"),
            "covers_taken": covers,
            "held_by_designated_at_end": sum(1 for t, h in lease_map(run.zk, chroot)[0].items()
                                             if designated and designated.get(t) == h),
        })
        if not window:
            # The nodes' CPU seconds (user + system, all 20) from the poll at or after the last
            # registration to the poll at or after every lease was on its designated node, and
            # from their start to the end: comparable on a busy machine, where wall time is not.
            cpu_at = lambda t: next((c for c in cpu_samples if c[0] >= t), None)
            if last_registration and at_designated and cpu_at(at_designated) is not None:
                (_, nodes_a, zk_a), (_, nodes_b, zk_b) = (cpu_at(last_registration),
                                                          cpu_at(at_designated))
                result["nodes_cpu_cold_start_s"] = round(nodes_b - nodes_a, 2)
                result["zk_cpu_cold_start_s"] = round(zk_b - zk_a, 2)
            result["nodes_cpu_total_s"] = round(sum(cpu_seconds(n.proc.pid) for n in nodes), 2)
            result["loadavg_1m"] = os.getloadavg()[0]
            # Every write since the server started (a failed multi is one too): the counter
            # part of the zxid, on a server of its own.
            result["zk_transactions"] = run.zk.zxid() & 0xFFFFFFFF
            result["settled"] = settled is not None
            result["settle_s"] = round(settled - t0, 1) if settled else None
            result["warnings"] = anomalies(nodes)
            if settled is None:
                result["details"] = diagnose(nodes)
                run.keep = True
            if run.keep:
                result["tmp"] = run.tmp
            return result
        holders, members = lease_holders(run.zk, chroot)
        mntr = run.zk.mntr()
        result.update({
            "all_registered_s": round(registered - t0, 1) if registered else None,
            "settled": settled is not None,
            "settle_s": round(settled - t0, 1) if settled else None,
            "leases_in_zookeeper": sum(holders.values()), "members_in_zookeeper": members,
            "leases_per_node": {"nodes_holding": len(holders),
                                "min": min(holders.values(), default=0),
                                "max": max(holders.values(), default=0)},
            "znodes_settled": int(mntr["zk_znode_count"]), "znodes_empty_server": znodes_empty,
            "ephemerals": int(mntr["zk_ephemerals_count"]),
            "zk_watch_count": int(mntr["zk_watch_count"]),
            "zk_approximate_data_size_kib": round(int(mntr["zk_approximate_data_size"]) / 1024),
        })
        result["znodes_per_task_plus_node"] = round(
            (result["znodes_settled"] - znodes_empty) / (tasks + n_nodes), 3)
        if settled is None:
            result["details"] = diagnose(nodes)
            result["leases_by_holder"] = holders
            run.keep = True
        # Idle-ish window: count ZooKeeper writes, CPU and the ticks that fall due.
        time.sleep(2)
        z0, t_a = run.zk.zxid(), time.time()
        meter = CpuMeter(run.procs).start()
        c0 = {n.id: cpu_seconds(n.proc.pid) for n in nodes}
        zk_c0 = cpu_seconds(run.zk.proc.pid)
        sleep_until(time.time() + args.seconds)
        z1, t_b = run.zk.zxid(), time.time()
        machine_cpu = meter.stop()
        c1 = {n.id: cpu_seconds(n.proc.pid) for n in nodes}
        zk_c1 = cpu_seconds(run.zk.proc.pid)
        rss = [rss_kib(n.proc.pid) / 1024 for n in nodes]
        zk_rss = rss_kib(run.zk.proc.pid) / 1024
        mntr_end = run.zk.mntr()
        holders, members_end = lease_holders(run.zk, chroot)
        due = [(i, m) for m in range(math.ceil(t_a / 60) * 60, int(t_b) + 1, 60)
               for i in range(tasks) if m // 60 % 60 == i % 60]
        time.sleep(3)
        for n in nodes:
            n.poll()
        started = {e["fire_id"] for e in fires(nodes)}
        fired = sum(1 for i, m in due if f"task-{i:05d}@{m}" in started)
        cpu = [100 * (c1[i] - c0[i]) / (t_b - t_a) for i in c0]
        result.update({
            "znodes_end_of_window": int(mntr_end["zk_znode_count"]),
            "members_end_of_window": members_end,
            "window_s": round(t_b - t_a, 1), "zk_writes": z1 - z0,
            "zk_writes_per_min": round((z1 - z0) * 60 / (t_b - t_a)),
            "zk_writes_by_kind": run.zk.writes_between(z0, z1),
            "ticks_due_in_window": len(due), "ticks_fired": fired,
            "rss_mib_per_node": {"min": round(min(rss), 1),
                                 "median": round(statistics.median(rss), 1),
                                 "max": round(max(rss), 1)},
            "cpu_percent_per_node": {"median": round(statistics.median(cpu), 2),
                                     "max": round(max(cpu), 2), "sum": round(sum(cpu), 1)},
            "zk_rss_mib": round(zk_rss),
            "zk_cpu_percent": round(100 * (zk_c1 - zk_c0) / (t_b - t_a), 1),
            "cpu_during_window": machine_cpu,
            "nodes_that_saw_own_lease_deleted": sorted(
                n.id for n in nodes if n.find("this node's lease was deleted by someone else")),
            "nodes_holding_leases_but_never_fired": sorted(
                n.id for n in nodes if n.last_fire_ts is None and holders.get(n.id)),
            "ticks_not_fired_examples": [f"task-{i:05d}@{m}" for i, m in due
                                         if f"task-{i:05d}@{m}" not in started][:5],
            "leases_by_node": dict(sorted(holders.items())),
            "warnings": anomalies(nodes),
        })
        if run.keep:
            result["tmp"] = run.tmp
        return result


def join(args):
    tasks, period = args.join_tasks, 10
    jitter = humantime_s(args.join_jitter)
    names = task_names(tasks)
    with Run("join", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        extra = 'catch_up = "all"\nstarting_deadline = "1m"\n'
        if jitter > 0:
            extra += f'jitter = "{args.join_jitter}"\n'
        write_tasks(jobs, tasks, lambda i: "*/10 * * * * *", extra)
        connect = run.zk.connect("/join")
        old = [Node(run.procs, run.tmp, connect, f"old{i + 1}", jobs, version="1.0.0",
                    session_timeout=args.session_timeout) for i in range(2)]
        result = {"phase": "join", "tasks": tasks, "schedule": "*/10 * * * * *",
                  "jitter": args.join_jitter}
        try:
            wait_settled(old, tasks, 120)
        except SettleError as e:
            result.update(failed=e.what, details=e.details, warnings=anomalies(old))
            run.keep = True
            return result
        first_tick = math.ceil(time.time() / period) * period + period
        # Join a few seconds after the first audited tick, at a random point of the period.
        sleep_until(first_tick + 2 + random.Random(args.seed).uniform(0, period))
        t_join = time.time()
        meter = CpuMeter(run.procs).start()
        new = Node(run.procs, run.tmp, connect, "new1", jobs, version="1.1.0",
                   session_timeout=args.session_timeout)
        everyone = old + [new]
        registered = wait_for("new node registered",
                              lambda: new.find("registered in ZooKeeper"), 60, 0.05)[0]["ts"]
        result["new_node_start_to_registered_s"] = round(registered - t_join, 3)
        try:
            wait_for("new node leads everything",
                     lambda: new.leading() == tasks and all(o.leading() == 0 for o in old),
                     args.join_deadline, 0.05)
            new_all = next(e["ts"] for e in new.lease_changes if e["leading"] == tasks)
            old_zero = [next(e["ts"] for e in o.lease_changes
                             if e["ts"] >= registered and e["leading"] == 0) for o in old]
            done = max([new_all] + old_zero)
            result.update({
                "registered_to_new_leads_all_s": round(new_all - registered, 3),
                "registered_to_old_lead_none_s": round(max(old_zero) - registered, 3),
                "migration_s": round(done - registered, 3),
            })
        except TimeoutError:
            done = time.time()
            result["failed"] = f"migration not complete {args.join_deadline} s after registering"
            result["details"] = diagnose(everyone)
            result["leading_at_deadline"] = {n.id: n.leading() for n in everyone}
            result["new_node_max_leading"] = max((e["leading"] for e in new.lease_changes),
                                                 default=None)
            zero = [next((e["ts"] for e in o.lease_changes
                          if e["ts"] >= registered and e["leading"] == 0), None) for o in old]
            if None not in zero:
                result["registered_to_old_lead_none_s"] = round(max(zero) - registered, 3)
            run.keep = True
        # Let two more periods (and their jitter) pass, then audit every tick since first_tick.
        sleep_until(done + 2 * period + jitter + 3)
        last_tick = math.floor((time.time() - jitter - 2) / period) * period
        for n in everyone:
            n.poll()
        started = fires(everyone)
        new_first = min((e["ts"] for e in fires([new])), default=None)
        result.update({
            "registered_to_first_fire_by_new_s":
                round(new_first - registered, 3) if new_first else None,
            "fires_by_old_nodes_after_migration":
                sum(1 for e in started if e["_node"] != new.id and e["ts"] > done),
            "audit": audit(started, names, first_tick, last_tick, period,
                           skipped=overlap_skips(everyone)),
            "fires_by_node": {n.id: sum(1 for e in started if e["_node"] == n.id)
                              for n in everyone},
            "cpu_from_join_to_audit": meter.stop(),
            "warnings": anomalies(everyone),
        })
        if run.keep:
            result["tmp"] = run.tmp
        return result


def wait_designated(zk, chroot, names, timeout):
    """Until ZooKeeper shows every lease of `names` held by its designated node (the rank spec
    over the live member records: newest release, then score, then id); returns that time. An
    outside check, polled about every 50-100 ms (one `dump` and the member records per poll)."""
    cache = {}

    def check():
        members = read_members(zk, chroot)
        key = tuple(sorted((i, m["release"], m["seed"], m.get("leads", True),
                            m["taskset"]["digest"]) for i, m in members.items()))
        if key not in cache:
            cache[key] = designated_holders(members, names)[0] if members else None
        designated = cache[key]
        if designated is None:
            return None
        holder_of, _ = lease_map(zk, chroot)
        return time.time() if holder_of == designated else None
    return wait_for("every lease with its designated node", check, timeout, 0.02)


def rolling(args):
    """Three nodes at 1.0.0 with `--join-tasks` tasks (as `join`: `*/10 * * * * *`, `catch_up =
    "all"`, `--join-jitter`); then each node in turn is upgraded as an operator would: SIGTERM,
    the others take its leases, it exits, it starts again with `--node-version 1.1.0` (same
    node id and state dir). A step ends when ZooKeeper shows every lease with its designated
    node (rank spec over the member records). Per step: SIGTERM -> leases moved, -> exit, start
    -> registered, registered -> every lease designated, and the step in all; the whole rolling
    upgrade; then double and missing ticks from the period before it to two periods after."""
    tasks, period = args.join_tasks, 10
    jitter = humantime_s(args.join_jitter)
    names = task_names(tasks)
    with Run("rolling", args.keep, args.tmpdir) as run:
        jobs = os.path.join(run.tmp, "jobs.d")
        extra = 'catch_up = "all"\nstarting_deadline = "1m"\n'
        if jitter > 0:
            extra += f'jitter = "{args.join_jitter}"\n'
        write_tasks(jobs, tasks, lambda i: "*/10 * * * * *", extra)
        chroot = "/rolling"
        connect = run.zk.connect(chroot)
        ids = ["node1", "node2", "node3"]
        live = {i: Node(run.procs, run.tmp, connect, i, jobs, version="1.0.0",
                        session_timeout=args.session_timeout) for i in ids}
        everyone = list(live.values())  # every incarnation, for the audit
        result = {"phase": "rolling", "tasks": tasks, "nodes": 3, "from": "1.0.0", "to": "1.1.0",
                  "schedule": "*/10 * * * * *", "jitter": args.join_jitter}
        try:
            wait_settled(list(live.values()), tasks, 120)
            wait_designated(run.zk, chroot, names, 60)
        except (SettleError, TimeoutError) as e:
            result.update(failed=str(e)[:3000], warnings=anomalies(everyone))
            run.keep = True
            return result
        first_tick = math.ceil(time.time() / period) * period + period
        sleep_until(first_tick + 2 + random.Random(args.seed).uniform(0, period))
        meter = CpuMeter(run.procs).start()
        steps = []
        try:
            for node_id in ids:
                old = live[node_id]
                t_term = time.time()
                old.term()
                moved = wait_designated(run.zk, chroot, names, args.join_deadline)
                code = old.wait(60)
                t_exit = time.time()
                new = Node(run.procs, run.tmp, connect, node_id, jobs, version="1.1.0",
                           session_timeout=args.session_timeout, incarnation=1)
                live[node_id] = new
                everyone.append(new)
                registered = wait_for(f"{node_id} (1.1.0) registered",
                                      lambda: new.find("registered in ZooKeeper"), 60,
                                      0.02)[0]["ts"]
                settled = wait_designated(run.zk, chroot, names, args.join_deadline)
                steps.append({
                    "node": node_id, "exit_code": code,
                    "term_to_leases_moved_s": round(moved - t_term, 3),
                    "term_to_exit_s": round(t_exit - t_term, 3),
                    "start_to_registered_s": round(registered - new.t_start, 3),
                    "registered_to_designated_s": round(settled - registered, 3),
                    "new_node_leads": new.leading(),
                    "step_s": round(settled - t_term, 3),
                    "_t_term": t_term, "_settled": settled,
                })
            done = steps[-1]["_settled"]
            result["total_s"] = round(done - steps[0]["_t_term"], 3)
        except TimeoutError as e:
            done = time.time()
            result["failed"] = f"step {len(steps) + 1}: {e}"
            result["details"] = diagnose(everyone)
            run.keep = True
        for step in steps:
            step.pop("_t_term")
            step.pop("_settled")
        result["steps"] = steps
        sleep_until(done + 2 * period + jitter + 3)
        last_tick = math.floor((time.time() - jitter - 2) / period) * period
        for n in everyone:
            n.poll()
        started = fires(everyone)
        result.update({
            "audit": audit(started, names, first_tick, last_tick, period,
                           skipped=overlap_skips(everyone)),
            "fires_by_release": {v: sum(len(fires([n])) for n in everyone if n.version == v)
                                 for v in ("1.0.0", "1.1.0")},
            "cpu_from_first_step_to_audit": meter.stop(),
            "warnings": anomalies(everyone),
        })
        if run.keep:
            result["tmp"] = run.tmp
        return result


# Figures summarised over `--runs` (median, min, max) and counts summed, per phase.
RUN_SUMMARY = {
    "join": ["registered_to_new_leads_all_s", "registered_to_old_lead_none_s", "migration_s"],
    "rolling": ["total_s"],
    "coldstart": ["cold_start_s", "nodes_cpu_cold_start_s", "nodes_cpu_total_s", "zk_transactions"],
}


def summarize_runs(name, results):
    """One object over the runs of a phase: medians of its figures, summed audit counts."""
    out = {"phase": name, "summary_of_runs": len(results),
           "failed_runs": sum(1 for r in results if "failed" in r or "aborted" in r)}
    figures = {key: [r[key] for r in results if isinstance(r.get(key), (int, float))]
               for key in RUN_SUMMARY[name]}
    if name == "rolling":
        for i in range(3):
            for key in ("step_s", "registered_to_designated_s", "term_to_leases_moved_s"):
                figures[f"step{i + 1}_{key}"] = [r["steps"][i][key] for r in results
                                                 if len(r.get("steps", [])) > i]
    for key, values in figures.items():
        if values:
            out[key] = {"median": round(statistics.median(values), 3),
                        "min": min(values), "max": max(values)}
    audits = [r["audit"] for r in results if "audit" in r]
    for key in ("fire_ids_checked", "duplicates", "missing", "skipped_by_overlap_policy"):
        out[key] = sum(a[key] for a in audits)
    return out


def coldstart(args):
    """`scale` without the idle window: the cold-start and settle figures only."""
    return scale(args, window=False)


PHASES = {"lateness": lateness, "takeover": takeover, "scale": scale, "coldstart": coldstart,
          "join": join, "rolling": rolling}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=list(PHASES) + ["all"], default="all")
    parser.add_argument("--runs", type=int, default=1, help="repeat each phase this many times")
    parser.add_argument("--seconds", type=int, default=None,
                        help="measured window: lateness 30, scale 60")
    parser.add_argument("--jitter", default="1s", help="lateness: jitter of the 200 tasks")
    parser.add_argument("--trials", type=int, default=10, help="takeover: trials per kind")
    parser.add_argument("--restart-delay", type=float, default=5,
                        help="takeover: seconds between the takeover and the victim's restart")
    parser.add_argument("--max-clusters", type=int, default=10,
                        help="takeover: fresh clusters to use at most when trials fail")
    parser.add_argument("--session-timeout", default="3s")
    parser.add_argument("--tasks", type=int, default=10000, help="scale: tasks")
    parser.add_argument("--nodes", type=int, default=20, help="scale: nodes")
    parser.add_argument("--deadline", type=int, default=900, help="scale: settle deadline (s)")
    parser.add_argument("--join-tasks", type=int, default=1000)
    parser.add_argument("--join-jitter", default="9s",
                        help='join: spread the ticks over each 10 s period ("0s": none)')
    parser.add_argument("--join-deadline", type=int, default=30,
                        help="join: seconds after registering before the migration counts as failed")
    parser.add_argument("--seed", type=int, default=1, help="random kill and join instants")
    parser.add_argument("--retries", type=int, default=2,
                        help="runs again a run whose processes were killed from outside")
    parser.add_argument("--keep", action="store_true", help="keep temp dirs and logs")
    parser.add_argument("--tmpdir", default=None, help="where the temp dirs go (default: $TMPDIR)")
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit(f"{BINARY} not found: run `cargo build --release` first (or set ZKCRON_BIN)")
    if not os.path.exists(ZK_JAR):
        sys.exit(f"{ZK_JAR} not found: install Debian's zookeeper package (or set ZOOKEEPER_JAR)")
    print(json.dumps({"machine": machine_facts(), "binary": BINARY}), flush=True)
    # `scale` reports the cold-start figures too: `all` does not run `coldstart` again.
    phases = [p for p in PHASES if p != "coldstart"] if args.phase == "all" else [args.phase]
    for name in phases:
        phase_args = argparse.Namespace(**vars(args))
        if phase_args.seconds is None:
            phase_args.seconds = {"lateness": 30, "scale": 60}.get(name, 30)
        results = []
        for run in range(args.runs):
            phase_args.seed = args.seed + run
            for attempt in range(1 + args.retries):
                try:
                    result = PHASES[name](phase_args)
                    break
                except Interference as e:
                    # Not zkcron's doing: say so, and run again on a fresh cluster.
                    result = {"phase": name, "aborted": str(e)}
                    print(json.dumps(result), flush=True)
            result["run"] = run + 1
            print(json.dumps(result), flush=True)
            results.append(result)
        if name in RUN_SUMMARY and len(results) > 1:
            print(json.dumps(summarize_runs(name, results)), flush=True)


if __name__ == "__main__":
    main()
