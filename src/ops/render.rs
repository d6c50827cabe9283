//! The human forms of `status`, `explain` and `history`: aligned tables like
//! `systemctl list-timers`, times in RFC 3339 UTC (whole seconds), durations as `1m 5s`.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};

use super::explain::Explain;
use super::model::{BackfillProgress, Drift, LastRun, Status, TaskStatus};
use super::pool::PoolView;
use crate::coord::records::{HistoryEntry, RunTrigger};

/// An instant as the tables print it.
pub fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Whole seconds as `1h 2m 5s` (`0s` for none).
pub fn seconds(s: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(s)).to_string()
}

/// The whole seconds until `then`, rounded up (a tick 0.3 s away is "in 1s", as `zkcron next`
/// says).
pub fn until(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ms = (then - now).num_milliseconds().max(0) as u64;
    seconds(ms.div_ceil(1000))
}

/// Milliseconds as `1.234s`, or `450ms` under a second.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    }
}

/// A run's outcome in a word or two: `ok`, `exit 3`, `signal 9`, `failed`.
pub fn outcome(success: bool, exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (success, exit_code, signal) {
        (true, _, _) => "ok".into(),
        (false, Some(code), _) => format!("exit {code}"),
        (false, None, Some(signal)) => format!("signal {signal}"),
        (false, None, None) => "failed".into(),
    }
}

/// Rows of cells as a table: columns padded to their widest cell, two spaces apart, the last
/// column unpadded.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".into())
}

/// A task's drift in words: `1a2b3c4d5e6f on a, b; 9f8e7d6c5b4a on c`.
pub fn drift(drift: &[Drift]) -> String {
    drift
        .iter()
        .map(|d| {
            format!(
                "{} on {}",
                d.digest.get(..12).unwrap_or(&d.digest),
                d.nodes.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn last_cells(last: Option<&LastRun>, now: DateTime<Utc>) -> [String; 4] {
    match last {
        Some(last) => [
            instant(last.finished_at),
            format!(
                "{} ago",
                seconds((now - last.finished_at).num_seconds().max(0) as u64)
            ),
            outcome(last.success, last.exit_code, last.signal),
            last.node.clone(),
        ],
        None => ["-".into(), "-".into(), "-".into(), "-".into()],
    }
}

/// `zkcron status`: the nodes, then the tasks, then a summary line.
pub fn status(status: &Status, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let where_ = match &status.cluster {
        Some(cluster) => format!("cluster {cluster} ({})", status.backend),
        None => format!("{} backend", status.backend),
    };
    let _ = writeln!(out, "{where_}, at {}\n", instant(now));
    out.push_str(&nodes_table(status));
    out.push('\n');
    let (tasks, problems) = tasks_table(status, now);
    out.push_str(&tasks);
    let _ = writeln!(
        out,
        "\n{} node(s), {} task(s), {problems} with a problem.",
        status.nodes.len(),
        status.tasks.len()
    );
    out
}

/// The nodes of `zkcron status`, one row each.
fn nodes_table(status: &Status) -> String {
    let mut rows = vec![vec![
        "NODE".to_string(),
        "RELEASE".into(),
        "DRAINED".into(),
        "LEADS".into(),
        "SESSION".into(),
        "LABELS".into(),
    ]];
    for node in &status.nodes {
        let labels: Vec<String> = node
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rows.push(vec![
            node.id.clone(),
            node.release.clone(),
            if node.drained { "yes" } else { "no" }.into(),
            node.tasks_led.to_string(),
            seconds(node.session_age_s),
            if labels.is_empty() {
                "-".into()
            } else {
                labels.join(",")
            },
        ]);
    }
    table(&rows)
}

/// The tasks of `zkcron status`, one row each, and how many have a problem.
fn tasks_table(status: &Status, now: DateTime<Utc>) -> (String, usize) {
    let mut rows = vec![vec![
        "TASK".to_string(),
        "LEADER".into(),
        "NEXT".into(),
        "LEFT".into(),
        "LAST".into(),
        "PASSED".into(),
        "RESULT".into(),
        "RAN ON".into(),
        "NOTE".into(),
    ]];
    let mut problems = 0;
    for task in &status.tasks {
        let mut notes = Vec::new();
        if let Some(problem) = &task.problem {
            notes.push(problem.clone());
        }
        // A task that fires but whose last run failed needs a look as much as one that does
        // not fire: it counts as a problem too (RESULT says how the run ended).
        let failed = task.last.as_ref().is_some_and(|last| !last.success);
        if failed {
            notes.push("last run failed".into());
        }
        if task.problem.is_some() || failed {
            problems += 1;
        }
        if !task.drift.is_empty() {
            notes.push(format!("drift: {}", drift(&task.drift)));
        }
        if let Some(queued) = task.queued {
            notes.push(format!(
                "queued: {} waits for the live run",
                instant(queued)
            ));
        }
        notes.extend(window_note(task));
        notes.extend(task.done.clone());
        if !task.exclude.is_empty() {
            notes.push(format!("excludes calendars {}", task.exclude.join(", ")));
        }
        if let (Some((runs, max)), None) = (task.runs, &task.done) {
            notes.push(format!("runs: {runs} of max_runs {max}"));
        }
        notes.extend(links_notes(task));
        if !task.every_node.is_empty() {
            notes.push(format!("runs on {}", task.every_node.join(", ")));
        }
        if !task.work_items.is_empty() {
            let shares: Vec<String> = task
                .work_items
                .iter()
                .map(|(node, items)| format!("{node} {items}"))
                .collect();
            notes.push(format!("items: {}", shares.join(", ")));
        }
        notes.extend(task.backfills.iter().map(backfill));
        let [last, passed, result, ran_on] = last_cells(task.last.as_ref(), now);
        rows.push(vec![
            task.name.clone(),
            match &task.leader {
                _ if !task.every_node.is_empty() => "(every node)".into(),
                None if !task.work_items.is_empty() => "(work items)".into(),
                leader => dash(leader.clone()),
            },
            dash(task.next.map(instant)),
            dash(task.next.map(|n| until(n, now))),
            last,
            passed,
            result,
            ran_on,
            if notes.is_empty() {
                "-".into()
            } else {
                notes.join("; ")
            },
        ]);
    }
    (table(&rows), problems)
}

/// What `status` says of a task's `after` links: "after extract", "then load, report".
fn links_notes(task: &TaskStatus) -> impl Iterator<Item = String> {
    let after = (!task.after.is_empty()).then(|| format!("after {}", task.after.join(", ")));
    let then = (!task.children.is_empty()).then(|| format!("then {}", task.children.join(", ")));
    after.into_iter().chain(then)
}

/// `explain`'s lines of a task's parents, each with its state (the task's chained runs wait on
/// a parent that is not firing), and of its children.
fn links_lines(explain: &Explain) -> String {
    let mut out = String::new();
    for parent in &explain.parents {
        let state = match &parent.problem {
            Some(problem) => format!(
                "not firing: {problem}; the runs of {} after it wait on it",
                explain.task
            ),
            None => "firing".into(),
        };
        let _ = writeln!(out, "  after:    {}: {state}", parent.task);
    }
    if !explain.status.children.is_empty() {
        let _ = writeln!(
            out,
            "  then:     {}: each successful run runs each of them once",
            explain.status.children.join(", ")
        );
    }
    out
}

/// What `status` and `explain` say of a task outside its active window: "starts at ..." before
/// `active_from`, "ended at ..." after `active_until`.
fn window_note(task: &TaskStatus) -> Option<String> {
    match (task.starts_at, task.ended_at) {
        (Some(from), _) => Some(format!("starts at {}", instant(from))),
        (None, Some(until)) => Some(format!("ended at {}", instant(until))),
        (None, None) => None,
    }
}

/// `zkcron explain TASK`.
pub fn explain(explain: &Explain, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "task {}", explain.task);
    out.push_str(&explain_state(explain, now));
    let _ = writeln!(
        out,
        "\n{}",
        match explain.pool {
            None => "candidates, best first:",
            Some(_) => "candidates (the eligible ones share the items):",
        }
    );
    out.push_str(&candidates_table(explain));
    if !explain.not_defining.is_empty() {
        let _ = writeln!(
            out,
            "\nnot defining the task: {}",
            explain.not_defining.join(", ")
        );
    }
    match &explain.pool {
        None => {
            let _ = writeln!(
                out,
                "\nNodes rank by release (newest first), then by score (highest first); the \
                 first eligible node leads."
            );
        }
        Some(pool) => {
            let _ = writeln!(
                out,
                "\nitems, each with the node that owns it, the owner's rank for <task>/<item>, \
                 and the node holding its unit:"
            );
            out.push_str(&items_table(pool));
            let _ = writeln!(
                out,
                "\nEach item goes to the eligible node that ranks first for <task>/<item> \
                 (release, newest first, then score, highest first) and still has room: every \
                 node owns within one item of an even share (a RANK above 1: the nodes above \
                 had their share). Each node holding units runs each tick once with its items."
            );
        }
    }
    out
}

/// The items of a pooled task in `zkcron explain`, one row each: the item, its owner, the
/// owner's rank for the item, and who holds its unit (when not the owner: moving).
fn items_table(pool: &PoolView) -> String {
    let mut rows = vec![vec![
        "ITEM".to_string(),
        "OWNER".into(),
        "RANK".into(),
        "HOLDER".into(),
    ]];
    for item in &pool.items {
        let holder = match (&item.holder, &item.owner) {
            (None, _) => "- (vacant)".to_string(),
            (Some(holder), Some(owner)) if holder != owner => {
                format!("{holder} (moving to {owner})")
            }
            (Some(holder), _) => holder.clone(),
        };
        rows.push(vec![
            item.item.clone(),
            dash(item.owner.clone()),
            dash(item.rank.map(|r| r.to_string())),
            holder,
        ]);
    }
    table(&rows)
}

/// A pool's shares in words: `host-a owns 4, holds 3; host-b owns 4` (a node's holdings only
/// when they differ from what it owns), then the vacant items.
fn shares(pool: &PoolView) -> String {
    let mut words: Vec<String> = pool
        .shares
        .iter()
        .map(|share| {
            if share.owns == share.holds {
                format!("{} owns {}", share.node, share.owns)
            } else {
                format!("{} owns {}, holds {}", share.node, share.owns, share.holds)
            }
        })
        .collect();
    let vacant = pool.items.iter().filter(|i| i.holder.is_none()).count();
    if vacant > 0 {
        words.push(format!("{vacant} vacant"));
    }
    words.join("; ")
}

/// Who holds the task in `zkcron explain`: its lease and since when, the nodes holding the
/// units of a task that runs on every node, or a pool's shares.
fn holders(explain: &Explain) -> String {
    let mut out = String::new();
    let status = &explain.status;
    if let Some(pool) = &explain.pool {
        let _ = writeln!(
            out,
            "  items:    {} over {} node(s): {}",
            pool.total,
            pool.shares.iter().filter(|s| s.owns > 0).count(),
            shares(pool)
        );
    }
    match &explain.lease {
        None if explain.pool.is_some() => {}
        None if !status.every_node.is_empty() => {
            let _ = writeln!(
                out,
                "  units:    held by {}: the task runs on every node, each node every tick",
                status.every_node.join(", ")
            );
        }
        Some(lease) => {
            let _ = writeln!(
                out,
                "  lease:    held by {} since {} ({}){}",
                lease.node,
                instant(lease.since),
                seconds(lease.held_s),
                if lease.designated {
                    ", the designated leader"
                } else {
                    ", covering for the designated leader or handing over to it"
                }
            );
        }
        None => {
            let _ = writeln!(out, "  lease:    vacant");
        }
    }
    out
}

/// The task's state in `zkcron explain`: its lease, pause, next and last run, whether it fires,
/// and drift between the nodes' definitions.
fn explain_state(explain: &Explain, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let task = &explain.task;
    let status = &explain.status;
    out.push_str(&holders(explain));
    if let Some(mark) = &explain.paused {
        let _ = writeln!(
            out,
            "  paused:   since {} by {}; nothing fires until `zkcron resume {task}`",
            instant(mark.at),
            mark.by
        );
        if let Some(reason) = &mark.reason {
            let _ = writeln!(out, "  reason:   {reason}");
        }
    }
    let next = match status.next {
        Some(next) => format!("{} (in {})", instant(next), until(next, now)),
        None => "-".into(),
    };
    let _ = writeln!(out, "  next:     {next}");
    if let Some(note) = window_note(status) {
        let _ = writeln!(out, "  window:   {note}");
    }
    if !status.exclude.is_empty() {
        let _ = writeln!(
            out,
            "  exclude:  calendars {}: no tick in their days and periods",
            status.exclude.join(", ")
        );
    }
    match (&status.done, status.runs) {
        (Some(done), _) => {
            let _ = writeln!(out, "  done:     {done}: it fires no more");
        }
        (None, Some((runs, max))) => {
            let _ = writeln!(out, "  runs:     {runs} of max_runs {max} so far");
        }
        (None, None) => {}
    }
    let last = match &status.last {
        Some(last) => format!(
            "{} on {}, {} ({}), finished {}",
            last.fire_id,
            last.node,
            outcome(last.success, last.exit_code, last.signal),
            millis(last.duration_ms),
            instant(last.finished_at)
        ),
        None => "-".into(),
    };
    let _ = writeln!(out, "  last run: {last}");
    let firing = match &status.problem {
        Some(problem) => format!("not firing: {problem}"),
        None => "firing on schedule".into(),
    };
    let _ = writeln!(out, "  state:    {firing}");
    out.push_str(&links_lines(explain));
    for progress in &status.backfills {
        let _ = writeln!(out, "  backfill: {}", backfill(progress));
    }
    if !status.drift.is_empty() {
        let _ = writeln!(
            out,
            "  drift:    the nodes define it differently: {}; the leader runs its own \
             definition; make the task files equal",
            drift(&status.drift)
        );
    }
    out
}

/// An active backfill in words: `backfill <id>: 3 of 10 done, 1 failed, running <tick>`.
pub fn backfill(progress: &BackfillProgress) -> String {
    let running = progress
        .running
        .map(|tick| format!(", running {}", instant(tick)))
        .unwrap_or_default();
    format!(
        "backfill {}: {} of {} done, {} failed{running}",
        progress.id, progress.done, progress.total, progress.failed
    )
}

/// The candidates of `zkcron explain`, best first, one row each.
fn candidates_table(explain: &Explain) -> String {
    let mut rows = vec![vec![
        "RANK".to_string(),
        "NODE".into(),
        "RELEASE".into(),
        "SCORE".into(),
        "DEFINITION".into(),
        "ELIGIBLE".into(),
    ]];
    for c in &explain.candidates {
        let lease = explain
            .lease
            .as_ref()
            .filter(|l| l.node == c.node)
            .map_or("", |_| " (holds the lease)");
        rows.push(vec![
            c.rank.map_or("-".into(), |r| r.to_string()),
            c.node.clone(),
            c.release.clone(),
            c.score.clone(),
            c.digest.get(..12).unwrap_or(&c.digest).to_string(),
            if c.eligible {
                format!("yes{lease}")
            } else {
                format!("no: {}{lease}", c.reason)
            },
        ]);
    }
    if let Some(pool) = &explain.pool {
        pool_columns(&mut rows, explain, pool);
    }
    table(&rows)
}

/// The candidates of a pooled task: no rank or score for the task itself (each item is
/// ranked on its own), but each node's share of the items instead.
fn pool_columns(rows: &mut [Vec<String>], explain: &Explain, pool: &PoolView) {
    for (row, c) in rows.iter_mut().skip(1).zip(&explain.candidates) {
        row[3] = match pool.shares.iter().find(|s| s.node == c.node) {
            Some(s) if s.owns == s.holds => s.owns.to_string(),
            Some(s) => format!("{} (holds {})", s.owns, s.holds),
            None => "0".into(),
        };
    }
    rows[0][3] = "ITEMS".into();
    for row in rows.iter_mut() {
        row.remove(0);
    }
}

/// `zkcron history TASK`: the runs newest first.
pub fn history(runs: &[HistoryEntry]) -> String {
    let mut rows = vec![vec![
        "FIRE ID".to_string(),
        "TICK".into(),
        "NODE".into(),
        "RELEASE".into(),
        "STARTED".into(),
        "DURATION".into(),
        "RESULT".into(),
        "ATTEMPTS".into(),
        "TRIGGER".into(),
        "LAST LINE".into(),
    ]];
    for run in runs {
        rows.push(vec![
            run.fire_id.clone(),
            instant(run.tick),
            run.node.clone(),
            run.release.clone(),
            instant(run.started_at),
            millis(run.duration_ms),
            outcome(run.success, run.exit_code, run.signal),
            run.attempts.to_string(),
            match run.trigger {
                _ if run.backfill => "backfill",
                _ if run.after.is_some() => "after",
                RunTrigger::Schedule => "schedule",
                RunTrigger::Manual => "manual",
            }
            .into(),
            last_line(run.output_tail.as_deref()),
        ]);
    }
    table(&rows)
}

/// A failed run's last line of output (from its stored tail), cut to 60 characters; `-` when
/// none was stored (`zkcron logs` prints it all).
fn last_line(tail: Option<&str>) -> String {
    let Some(line) = tail.and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty())) else {
        return "-".into();
    };
    let line: String = line.trim().chars().filter(|c| !c.is_control()).collect();
    match line.char_indices().nth(59) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// The line `trigger --wait` prints for a run's result.
pub fn result_line(run: &HistoryEntry) -> String {
    let exit = match (run.exit_code, run.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no exit status".into(),
    };
    format!(
        "{}: {} on {} after {} ({exit}, {} attempt(s))",
        run.fire_id,
        if run.success { "succeeded" } else { "failed" },
        run.node,
        millis(run.duration_ms),
        run.attempts
    )
}
