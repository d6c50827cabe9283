#!/usr/bin/env python3
"""Memory soak: 1,000 tasks firing for N minutes, the daemon's RSS sampled.

Usage:  cargo build --release && python3 benches/soak.py [--minutes 30] [--tasks 1000]
            [--period 10] [--interval 5] [--warmup 60] [--csv FILE] [--check] [--plot FILE.png]
        ZKCRON_BIN=target/dist/zkcron python3 benches/soak.py --minutes 2 --warmup 20 --check  # CI
        python3 benches/soak.py --files 100000   # load 100,000 idle files: time, RSS, status, reloads

The release daemon (local backend, JSON log at info, default config otherwise) loads `tasks`
task files in a fresh temp dir. Every task fires every `period` seconds; task i at second
i % period of each period, plus `jitter = "1s"`, so 1,000 tasks at period 10 are 100 fires a
second, spread evenly over every second (180,000 fires in 30 minutes: a leak of a few bytes
per fire shows). Each task reaches the history cap (100 runs) after 100 periods. The mix,
by i % 20, exercises every path a fire can take:
  0-13  `true`                                            (70 %)
  14-15 `seq 1 500` through /bin/sh: over [log] job_output_lines (head, tail, left-out note)
  16    a line on stdout and one on stderr
  17    prints to stderr and exits 3; one retry after 1 s; on_failure hook (reads the tail)
  18    a program that is not installed (not_started); on_failure hook
  19    `sleep 3` with timeout 1s, kill_grace 1s (timed_out, process group killed); on_failure
Every `interval` seconds the script scrapes /metrics and /healthz (as Prometheus would) and
samples VmRSS and RssAnon of the daemon (/proc/<pid>/status); every 5 minutes it sends SIGHUP
(a reload of the 1,000 files). The daemon's log is read through a pipe and counted, never
stored: first attempts ended (= fires), by status, and hooks run.
The first `warmup` seconds are not measured: the figures start at the first sample after it.
Reports RSS at start, at end, max, the least-squares slope over the second half of the
measured span (KiB per hour), the RSS after each reload (median of 10-60 s after it; a reload
ends with malloc_trim) and its slope, with the fires counted and the load average.
--check: exits 1, saying why, when the daemon fired less than 90 % of the fires due, or
  RSS grew: end > start + MAX_GROWTH_MIB (default 4), or max > start + 2 * MAX_GROWTH_MIB, or
  (3 reloads or more, i.e. runs of 15 minutes) the RSS after each reload rose more than
  MAX_SLOPE KiB/min (default 64, 3.75 MiB an hour), or zkcron exited early or not 0 on
  SIGTERM. The raw second-half slope is reported, not checked: between reloads glibc keeps what
  a burst of jobs freed, steps of up to ~4 MiB, and a step near the end dominates that slope.
  A 2-minute run (CI) is 12,000 fires: 4 MiB catches a leak of ~350 bytes per fire.
--plot: renders the CSV as a PNG with matplotlib (not needed otherwise; install it in a venv).
Nothing outlives the run: the temp dir (zkcron-soak-*) is removed and the daemon (own session)
stopped on every exit path, Ctrl-C and SIGTERM included.
"""
import argparse
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("ZKCRON_BIN", os.path.join(ROOT, "target", "release", "zkcron"))
RELOAD_EVERY_S = 300


def task_file(i, period):
    """The task file of task i: fires every `period` s at second i % period, jittered within 1 s."""
    schedule = f"{i % period}-59/{period} * * * * *" if period < 60 else f"{i % 60} * * * * *"
    head = f'schedule = "{schedule}"\njitter = "1s"\ncatch_up = "skip"\n'
    k = i % 20
    if k < 14:
        return head + 'command = ["true"]\n'
    if k < 16:
        return head + 'command = "seq 1 500"\n'
    if k == 16:
        return head + 'command = "echo to stdout; echo to stderr >&2"\n'
    hook = 'on_failure = ["/bin/sh", "-c", "test -n \\"$ZKCRON_FAILURE\\""]\n'
    if k == 17:
        return (head + 'command = "echo about to fail >&2; exit 3"\n'
                'retries = { attempts = 1, backoff = "1s" }\n' + hook)
    if k == 18:
        return head + 'command = ["/nonexistent/zkcron-soak-job"]\n' + hook
    return head + 'command = ["sleep", "3"]\ntimeout = "1s"\nkill_grace = "1s"\n' + hook


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    """VmRSS and RssAnon in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(line.split()[1])
    return out["VmRSS"], out.get("RssAnon", 0)


class LogCounter(threading.Thread):
    """Reads the daemon's JSON log from a pipe and counts events; keeps the last error lines."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.lock = threading.Lock()
        self.started = False
        self.fires = 0  # first attempts ended (every fire ends one, however it ended)
        self.by_status = {}
        self.attempts = 0
        self.hooks_ok = 0
        self.hooks_failed = 0
        self.left_out_notes = 0
        self.errors = []
        self.invalid_files = 0
        self.reloads = []  # (monotonic time, the "tasks reloaded" event)

    def run(self):
        for raw in self.stream:
            line = raw.decode("utf-8", "replace")
            if '"finished"' in line or '"zkcron started"' in line or '"ERROR"' in line \
                    or '"tasks reloaded"' in line \
                    or "on_failure hook" in line or "lines_left_out" in line:
                self.count(line)

    def count(self, line):
        try:
            event = json.loads(line)
        except ValueError:
            return
        fields = event.get("fields", event)
        message = fields.get("message", "")
        with self.lock:
            if message == "zkcron started":
                self.started = True
            elif message == "tasks reloaded":
                self.reloads.append((time.monotonic(), fields))
            elif message == "finished":
                self.attempts += 1
                if str(fields.get("attempt", "1")) == "1":
                    self.fires += 1
                    status = fields.get("status", "?")
                    if status == "exited" and str(fields.get("exit_code")) != "0":
                        status = "exited_nonzero"
                    self.by_status[status] = self.by_status.get(status, 0) + 1
            elif message.startswith("on_failure hook finished"):
                self.hooks_ok += 1
            elif message.startswith("on_failure hook failed"):
                self.hooks_failed += 1
            elif "lines_left_out" in fields:
                self.left_out_notes += 1
            if message.startswith("invalid task file"):
                self.invalid_files += 1
            if event.get("level") == "ERROR":
                self.errors = (self.errors + [line.strip()])[-5:]

    def snapshot(self):
        with self.lock:
            return {"fires": self.fires, "attempts": self.attempts,
                    "by_status": dict(self.by_status), "hooks_ok": self.hooks_ok,
                    "hooks_failed": self.hooks_failed, "output_left_out_notes":
                    self.left_out_notes}


def scrape(port):
    """Sums zkcron_fires_total by outcome from /metrics, and /healthz's status; None if down."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            health = r.status
    except OSError:
        return None
    outcomes = {}
    for m in re.finditer(r'^zkcron_fires_total\{([^}]*)\} (\S+)', text, re.M):
        outcome = re.search(r'outcome="([^"]*)"', m.group(1))
        key = outcome.group(1) if outcome else "?"
        outcomes[key] = outcomes.get(key, 0) + int(float(m.group(2)))
    return {"fires_by_outcome": outcomes, "healthz": health}


def after_reloads(samples, warmup):
    """(t, KiB) per reload after the warm-up: the median VmRSS from 10 to 60 s after it. A
    reload ends with malloc_trim, so this is the heap without what glibc keeps of bursts."""
    points = []
    for k in range(1, int(samples[-1]["t_s"] // RELOAD_EVERY_S) + 1):
        at = k * RELOAD_EVERY_S
        window = sorted(s["rss_kib"] for s in samples if at + 10 <= s["t_s"] <= at + 60)
        if at >= warmup and window:
            points.append((at, window[len(window) // 2]))
    return points


def slope_kib_per_hour(points):
    """Least-squares slope of (seconds, KiB) points, in KiB per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mx) * (v - my) for t, v in points) / var * 3600


class Daemon:
    """The daemon in its own session (a Ctrl-C reaches the script only), stopped by `stop`."""

    def __init__(self, tmp, port, log_level="info"):
        config = os.path.join(tmp, "zkcron.toml")
        with open(config, "w") as f:
            f.write('[scheduler]\nshutdown_grace = "3s"\n'
                    f'[log]\nformat = "json"\n[http]\nlisten = "127.0.0.1:{port}"\n')
        env = dict(os.environ, ZKCRON_LOG=log_level)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [BINARY, "run", "--config", config, "--jobs-dir", os.path.join(tmp, "jobs.d"),
             "--state-dir", os.path.join(tmp, "state"), "--node-id", "soak"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env, start_new_session=True)
        self.log = LogCounter(self.proc.stderr)
        self.log.start()

    def wait_started(self, timeout):
        deadline = self.t0 + timeout
        while time.monotonic() < deadline:
            if self.log.started:
                return time.monotonic() - self.t0
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Jobs run in process groups of their own: none may outlive the soak (at most a
        # `sleep 3` the shutdown grace did not wait for).
        for pid in pids_with_fire_id(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.join(timeout=10)


def pids_with_fire_id(daemon_pid):
    """Processes started by this soak's daemon (ZKCRON_NODE=soak and our temp dir's jobs)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"ZKCRON_NODE=soak" in env and any(e.startswith(b"ZKCRON_FIRE_ID=") for e in env):
            found.append(int(entry))
    return found


def soak(args):
    tmp = tempfile.mkdtemp(prefix="zkcron-soak-")
    daemon = None
    try:
        jobs = os.path.join(tmp, "jobs.d")
        os.mkdir(jobs, 0o755)
        for i in range(args.tasks):
            with open(os.path.join(jobs, f"soak-{i:05d}.toml"), "w") as f:
                f.write(task_file(i, args.period))
        port = free_port()
        daemon = Daemon(tmp, port)
        startup = daemon.wait_started(120)
        if startup is None:
            sys.exit(f"soak: zkcron did not start within 120 s (exit {daemon.proc.poll()}); "
                     f"last errors: {daemon.log.errors}")
        if daemon.log.invalid_files:
            sys.exit(f"soak: {daemon.log.invalid_files} task files refused: {daemon.log.errors}")
        print(f"soak: {args.tasks} tasks loaded in {startup:.2f} s; warm-up {args.warmup} s, "
              f"then {args.minutes} min sampled every {args.interval} s "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)
        t_start = time.monotonic()
        measure_from = t_start + args.warmup
        end = measure_from + args.minutes * 60
        next_reload = t_start + RELOAD_EVERY_S
        samples = []
        fires_at_measure = None
        metrics_failures = 0
        last_print = 0.0
        next_sample = t_start
        while True:
            now = time.monotonic()
            if now >= end + 0.5 * args.interval:
                break
            if daemon.proc.poll() is not None:
                sys.exit(f"soak: FAIL: zkcron exited ({daemon.proc.returncode}) after "
                         f"{now - t_start:.0f} s; last errors: {daemon.log.errors}")
            if now >= next_reload:
                daemon.proc.send_signal(signal.SIGHUP)
                next_reload += RELOAD_EVERY_S
            scraped = scrape(port)
            if scraped is None or scraped["healthz"] != 200:
                metrics_failures += 1
            rss, anon = proc_status(daemon.proc.pid)
            counts = daemon.log.snapshot()
            t = time.monotonic() - t_start
            if fires_at_measure is None and time.monotonic() >= measure_from:
                fires_at_measure = (counts["fires"], t)
            samples.append({"t_s": round(t, 1), "rss_kib": rss, "rss_anon_kib": anon,
                            "fires": counts["fires"],
                            "fires_metrics": sum((scraped or {}).get("fires_by_outcome",
                                                                     {}).values()),
                            "load1": round(os.getloadavg()[0], 2)})
            if t - last_print >= 60:
                last_print = t
                print(f"soak: t={t:6.0f} s  RSS {rss / 1024:6.1f} MiB  anon "
                      f"{anon / 1024:6.1f} MiB  fires {counts['fires']}  load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)
            next_sample += args.interval
            time.sleep(max(0.0, next_sample - time.monotonic()))
        final_scrape = scrape(port)
        counts = daemon.log.snapshot()
        daemon.stop()
        exit_code = daemon.proc.returncode
        daemon = None
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    measured = [s for s in samples if s["t_s"] >= args.warmup]
    if len(measured) < 4:
        sys.exit("soak: too few samples after the warm-up (raise --minutes)")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(samples[0]))
            writer.writeheader()
            writer.writerows(samples)
    t0 = measured[0]["t_s"]
    t_end = measured[-1]["t_s"]
    half = [(s["t_s"], s["rss_kib"]) for s in measured if s["t_s"] >= (t0 + t_end) / 2]
    half_anon = [(s["t_s"], s["rss_anon_kib"]) for s in measured if s["t_s"] >= (t0 + t_end) / 2]
    span = t_end - fires_at_measure[1]
    fires_measured = measured[-1]["fires"] - fires_at_measure[0]
    due = args.tasks / args.period * span
    result = {
        "binary": BINARY, "tasks": args.tasks, "period_s": args.period,
        "minutes": args.minutes, "warmup_s": args.warmup, "interval_s": args.interval,
        "startup_s": round(startup, 2), "samples": len(measured),
        "rss_mib": {"start": round(measured[0]["rss_kib"] / 1024, 2),
                    "end": round(measured[-1]["rss_kib"] / 1024, 2),
                    "max": round(max(s["rss_kib"] for s in measured) / 1024, 2),
                    "min": round(min(s["rss_kib"] for s in measured) / 1024, 2)},
        "rss_anon_mib": {"start": round(measured[0]["rss_anon_kib"] / 1024, 2),
                         "end": round(measured[-1]["rss_anon_kib"] / 1024, 2),
                         "max": round(max(s["rss_anon_kib"] for s in measured) / 1024, 2)},
        "slope_second_half_kib_per_hour": round(slope_kib_per_hour(half), 1),
        "slope_second_half_anon_kib_per_hour": round(slope_kib_per_hour(half_anon), 1),
        "slope_whole_kib_per_hour": round(slope_kib_per_hour(
            [(s["t_s"], s["rss_kib"]) for s in measured]), 1),
        "rss_mib_after_each_reload": [round(v / 1024, 2) for _, v in
                                      after_reloads(samples, args.warmup)],
        "slope_after_reloads_kib_per_hour": round(slope_kib_per_hour(
            after_reloads(samples, args.warmup)), 1),
        "fires_measured": fires_measured, "fires_due": int(due),
        "log_counts_total": counts,
        "metrics_fires_by_outcome": (final_scrape or {}).get("fires_by_outcome"),
        "metrics_or_healthz_failures": metrics_failures,
        "daemon_exit": exit_code,
        "load1": {"min": min(s["load1"] for s in samples), "max": max(s["load1"] for s in samples),
                  "mean": round(sum(s["load1"] for s in samples) / len(samples), 2)},
    }
    print(json.dumps(result, indent=1), flush=True)
    if args.plot:
        plot(samples, args, result)
    if args.check:
        check(result, args)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def timed(argv):
    t = time.monotonic()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    return time.monotonic() - t, done


def status_on_socket(state_dir):
    """Seconds the daemon takes to answer `status` on its control socket, waited for."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.path.join(state_dir, "zkcron.sock"))
        t = time.monotonic()
        s.sendall(b'{"op": "status"}\n')
        while s.recv(1 << 20):
            pass
        return round(time.monotonic() - t, 3)


def wait_reload(daemon, count, timeout=120):
    """Seconds until the daemon logged its `count`-th "tasks reloaded", and that event."""
    t = time.monotonic()
    while time.monotonic() < t + timeout:
        with daemon.log.lock:
            if len(daemon.log.reloads) >= count:
                at, event = daemon.log.reloads[count - 1]
                return round(at - t, 3), event
        time.sleep(0.01)
    sys.exit(f"soak --files: no reload logged within {timeout} s")


def files(args):
    """--files N: N idle task files (3,600 distinct expressions, none due during the run):
    start-up, RSS, open fds, `zkcron status --json` and reloads, on a fresh daemon."""
    tmp = tempfile.mkdtemp(prefix="zkcron-soak-")
    daemon = None
    hour = (time.gmtime().tm_hour + 12) % 24
    try:
        jobs = os.path.join(tmp, "jobs.d")
        os.mkdir(jobs, 0o755)
        for i in range(args.files):
            with open(os.path.join(jobs, f"idle-{i:06d}.toml"), "w") as f:
                f.write(f'schedule = "{i % 60} {i // 60 % 60} {hour} * * *"\n'
                        'command = ["true"]\ncatch_up = "skip"\n')
        result = {"binary": BINARY, "files": args.files, "loadavg_before": os.getloadavg()}
        daemon = Daemon(tmp, free_port())
        startup = daemon.wait_started(600)
        if startup is None:
            sys.exit(f"soak --files: zkcron did not start within 600 s "
                     f"(exit {daemon.proc.poll()}); last errors: {daemon.log.errors}")
        pid = daemon.proc.pid
        result["startup_s"] = round(startup, 3)
        result["rss_mib_at_started"] = round(proc_status(pid)[0] / 1024, 1)
        result["start_reload"] = daemon.log.reloads[0][1] if daemon.log.reloads else None
        time.sleep(10)  # every task planned
        rss, anon = proc_status(pid)
        result["rss_mib_after_10s"] = round(rss / 1024, 1)
        result["rss_anon_mib_after_10s"] = round(anon / 1024, 1)
        result["open_fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(10)
        result["idle_cpu_percent_of_one_core"] = round(
            100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0), 2)
        status = [BINARY, "status", "--json", "--config", os.path.join(tmp, "zkcron.toml"),
                  "--state-dir", os.path.join(tmp, "state")]
        elapsed, done = timed(status)
        result["status_json_s"] = round(elapsed, 3)
        result["status_exit"] = done.returncode
        if done.returncode == 0:
            result["status_json_tasks"] = len(json.loads(done.stdout)["tasks"])
            result["status_json_bytes"] = len(done.stdout)
        else:
            result["status_error"] = done.stderr.decode().strip()[-500:]
            # How long the daemon takes, asked on its socket without the client's deadline.
            result["status_socket_s"] = status_on_socket(os.path.join(tmp, "state"))
        result["rss_mib_after_status"] = round(proc_status(pid)[0] / 1024, 1)
        daemon.proc.send_signal(signal.SIGHUP)
        result["sighup_reload_s"], event = wait_reload(daemon, 2)
        result["sighup_reload"] = event
        with open(os.path.join(jobs, "idle-000000.toml"), "a") as f:
            f.write('description = "changed"\n')
        # The watch waits for 300 ms of quiet before it reloads.
        result["one_file_changed_reload_s"], event = wait_reload(daemon, 3)
        result["one_file_changed_reload"] = event
        result["rss_mib_after_reloads"] = round(proc_status(pid)[0] / 1024, 1)
        t = time.monotonic()
        daemon.stop()
        result["stop_s"] = round(time.monotonic() - t, 3)
        result["daemon_exit"] = daemon.proc.returncode
        daemon = None
        result["loadavg_after"] = os.getloadavg()
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for key in ("start_reload", "sighup_reload", "one_file_changed_reload"):
        if result[key]:
            result[key] = {k: v for k, v in result[key].items()
                           if k in ("added", "changed", "removed", "invalid_files", "errors")}
    print(json.dumps(result, indent=1), flush=True)
    if result.get("status_json_tasks") != args.files or result["daemon_exit"] != 0:
        sys.exit("soak --files: FAIL: `zkcron status` did not list every task, or zkcron did "
                 "not exit 0")


def check(result, args):
    rss = result["rss_mib"]
    problems = []
    if result["fires_measured"] < 0.9 * result["fires_due"]:
        problems.append(f"fired {result['fires_measured']} of {result['fires_due']} fires due "
                        "(< 90 %): the soak did not load the daemon")
    if rss["end"] > rss["start"] + args.max_growth_mib:
        problems.append(f"RSS grew from {rss['start']} MiB to {rss['end']} MiB "
                        f"(bound: + {args.max_growth_mib} MiB)")
    if rss["max"] > rss["start"] + 2 * args.max_growth_mib:
        problems.append(f"RSS peaked at {rss['max']} MiB from {rss['start']} MiB "
                        f"(bound: + {2 * args.max_growth_mib} MiB)")
    # Over a short run the heaps are still filling (the first minutes add ~0.5 MiB): the slope
    # says something from 10 minutes on; the growth bounds hold for any length.
    # Between reloads glibc keeps what a burst of jobs freed (steps of up to ~4 MiB that the
    # next reload's malloc_trim returns), so the raw slope measures those steps; the trend is
    # the slope of the RSS after each reload (one every 5 minutes).
    reload_slope = result["slope_after_reloads_kib_per_hour"] / 60
    if len(result["rss_mib_after_each_reload"]) >= 3 and reload_slope > args.max_slope:
        problems.append(f"RSS after each reload ({result['rss_mib_after_each_reload']} MiB) "
                        f"rose {reload_slope:.1f} KiB/min (bound: {args.max_slope} KiB/min)")
    if result["daemon_exit"] != 0:
        problems.append(f"zkcron exited {result['daemon_exit']} on SIGTERM (expected 0)")
    if problems:
        print("soak: FAIL: " + "; ".join(problems), file=sys.stderr)
        sys.exit(1)
    print(f"soak: OK: RSS {rss['start']} -> {rss['end']} MiB (max {rss['max']}), "
          f"after reloads {result['rss_mib_after_each_reload']} MiB, "
          f"{result['fires_measured']} "
          f"fires of {result['fires_due']} due", flush=True)


def plot(samples, args, result):
    import matplotlib  # only for --plot: CI does not need it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    minutes = [s["t_s"] / 60 for s in samples]
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    ax.plot(minutes, [s["rss_kib"] / 1024 for s in samples], label="VmRSS")
    ax.plot(minutes, [s["rss_anon_kib"] / 1024 for s in samples], label="RssAnon (heap)")
    ax.axvline(args.warmup / 60, color="grey", linestyle=":", label="end of warm-up")
    ax.set_xlabel("minutes since zkcron started")
    ax.set_ylabel("MiB")
    top = max(s["rss_kib"] for s in samples) / 1024
    ax.set_ylim(0, top * 1.3)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(minutes, [s["fires"] / 1000 for s in samples], color="tab:green", alpha=0.5,
             linestyle="--", label="fires (thousands)")
    ax2.set_ylabel("fires (thousands)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right")
    ax.set_title(f"zkcron soak: {args.tasks} tasks every {args.period} s, "
                 f"{result['fires_measured']:,} fires in {args.minutes:g} min; RSS after each reload "
                 f"(SIGHUP every 5 min): {result['slope_after_reloads_kib_per_hour']:+.0f} KiB/h",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(args.plot)
    print(f"soak: plot written to {args.plot}", flush=True)


def plot_only(args):
    """--from-csv: re-renders a PNG from a CSV written by an earlier run."""
    with open(args.from_csv) as f:
        samples = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    measured = [s for s in samples if s["t_s"] >= args.warmup]
    half = [(s["t_s"], s["rss_kib"]) for s in measured
            if s["t_s"] >= (measured[0]["t_s"] + measured[-1]["t_s"]) / 2]
    result = {"fires_measured": int(measured[-1]["fires"] - measured[0]["fires"]),
              "slope_second_half_kib_per_hour": slope_kib_per_hour(half),
              "slope_after_reloads_kib_per_hour": slope_kib_per_hour(
                  after_reloads(samples, args.warmup))}
    print(json.dumps({**result, "rss_mib_after_each_reload": [
        round(v / 1024, 2) for _, v in after_reloads(samples, args.warmup)]}))
    plot(samples, args, result)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30, help="measured span (after warm-up)")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--period", type=int, default=10, help="seconds between a task's fires")
    parser.add_argument("--interval", type=float, default=5, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=60, help="seconds not measured")
    parser.add_argument("--csv", help="write every sample here")
    parser.add_argument("--check", action="store_true", help="fail when RSS grows (see above)")
    parser.add_argument("--max-growth-mib", type=float, default=4)
    parser.add_argument("--max-slope", type=float, default=64, help="KiB/min, RSS after each reload")
    parser.add_argument("--plot", help="render the samples as a PNG (needs matplotlib)")
    parser.add_argument("--files", type=int,
                        help="instead of the soak: load this many idle task files (e.g. 100000)")
    parser.add_argument("--from-csv", help="with --plot: render an earlier run's CSV, run nothing")
    args = parser.parse_args()
    if args.from_csv:
        return plot_only(args)
    if not os.path.exists(BINARY):
        sys.exit(f"{BINARY} not found: run `cargo build --release` first")
    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so the daemon is stopped and the dir removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("soak: terminated"))
    if args.files:
        return files(args)
    soak(args)


if __name__ == "__main__":
    main()
