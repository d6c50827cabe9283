//! The manual pages and the shell completions: `zkcron(1)` and the completions are generated
//! from the clap definition in [`crate::cli`], so they cannot drift from what the binary
//! accepts; `zkcron-task(5)`, the task-file format, lists every task key (a test compares them
//! with the parser's). `cli` hands
//! its `clap::Command` in, so this module does not import the command line that calls it.
//!
//! The packages ship what `zkcron man` and `zkcron completions SHELL` print (see
//! `scripts/package`). This module only renders text; it reads no config and starts nothing.

use std::io::{self, Write};

use clap_complete::Shell;

/// The arguments of the hidden `zkcron man` (which the packages build runs).
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Which page.
    #[arg(value_enum, default_value_t = ManPage::Zkcron)]
    pub page: ManPage,
}

/// The manual pages the packages ship.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ManPage {
    /// zkcron(1): the commands.
    Zkcron,
    /// zkcron-task(5): the task-file format.
    ZkcronTask,
}

/// Writes `zkcron(1)`, from `command` (`Cli::command()`), in roff: clap_mangen's title, name, synopsis, description and options,
/// then one subsection per visible subcommand with its own options (clap_mangen alone would
/// point at `zkcron-run(1)` and friends, which are not shipped), then files, signals and exit
/// status.
pub fn write_man_page(command: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let man = clap_mangen::Man::new(command.clone())
        .section("1")
        .manual("zkcron manual")
        .source(format!("zkcron {}", env!("CARGO_PKG_VERSION")));
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;

    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        writeln!(out, ".SS \"zkcron {}\"", escape(name))?;
        if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
            writeln!(out, "{}", escape(&about.to_string()))?;
        }
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            writeln!(out, ".TP")?;
            writeln!(out, "{}", arg_heading(arg))?;
            if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
                writeln!(out, "{}", escape(&help.to_string()))?;
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                writeln!(out, "[default: {}]", escape(&defaults.join(", ")))?;
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                writeln!(out, ".br")?;
                writeln!(out, "One of: {}.", escape(&values.join(", ")))?;
            }
        }
    }
    out.write_all(EXTRA_SECTIONS.as_bytes())?;
    man.render_version_section(out)?;
    Ok(())
}

/// `--long-flag VALUE`, `-s`, or `VALUE` for a positional, in roff bold/italic.
fn arg_heading(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|name| name.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let takes_value = arg.get_action().takes_values();
    let mut flags = Vec::new();
    if let Some(short) = arg.get_short() {
        flags.push(format!("\\fB\\-{}\\fR", escape(&short.to_string())));
    }
    if let Some(long) = arg.get_long() {
        flags.push(format!("\\fB\\-\\-{}\\fR", escape(long)));
    }
    if flags.is_empty() {
        return format!("\\fI{}\\fR", escape(&value));
    }
    let mut heading = flags.join(", ");
    if takes_value {
        heading.push_str(&format!(" \\fI{}\\fR", escape(&value)));
    }
    heading
}

/// Escapes text for roff: backslashes, hyphens (so they stay ASCII hyphens, which man page
/// linters ask for), and a leading `.` or `'` that would read as a request.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|line| {
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a packaged daemon's manual page should also say: what it guarantees, where things are,
/// how to signal it, what the exit codes mean.
const EXTRA_SECTIONS: &str = r#".SH GUARANTEES
Each tick is claimed in one atomic step before its process starts, and a tick whose claim fails does not run. What that guarantees about each tick is stated in \fI/usr/share/doc/zkcron/README.md\fR, "The guarantee"; the fire id (\fBZKCRON_FIRE_ID\fR in the job's environment) lets a job make itself idempotent.
.SH FILES
.TP
\fI/etc/zkcron/zkcron.toml\fR
The node configuration, read by \fBrun\fR, \fBvalidate\fR, \fBnext\fR and the operator commands (\fBstatus\fR, \fBexplain\fR, \fBhistory\fR, \fBtrigger\fR, \fBbackfill\fR, \fBpause\fR, \fBresume\fR, \fBdrain\fR, \fBundrain\fR) when \fB\-\-config\fR is not given.
.TP
\fI/etc/zkcron/jobs.d/\fR
Task files, one task per \fINAME\fR.toml; the default jobs dir beside the configuration.
.TP
\fI/var/lib/zkcron/\fR
The state dir of the packaged service (systemd's \fBStateDirectory=\fR): fire records of the local backend and the lock that keeps a second daemon out.
.TP
\fI/var/lib/zkcron/zkcron.sock\fR
The local backend's control socket (mode 0600): the operator commands reach the daemon of a single host through it.
.SH SIGNALS
.TP
\fBSIGHUP\fR
Re\-read the jobs dir (\fBsystemctl reload zkcron\fR). A change in the jobs dir is also picked up by itself.
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Graceful stop: fire nothing new and start no retry, release every lease at once, let running jobs finish for up to \fBshutdown_grace\fR, then kill their process groups.
.SH "EXIT STATUS"
0 on success, 1 for invalid input or a failed check (for the operator commands also: ZooKeeper or the local daemon unreachable, an unknown task, a triggered run that failed or could not run), 2 for a usage error.
.SH "SEE ALSO"
\fBzkcron\-task\fR(5), \fBsystemctl\fR(1), \fBcrontab\fR(5), \fBsystemd.service\fR(5)
"#;

/// The keys of a task file as `zkcron-task(5)` documents them, each with its roff paragraph, in
/// the order of the page. `tests/cli.rs` fails when a key the parser accepts
/// (`task::TASK_KEYS`) is missing here.
pub const TASK_PAGE_KEYS: &[(&str, &str)] = &[
    (
        "schedule",
        r#"(string, required unless \fBafter\fR is set) A cron expression in Vixie/cronie syntax, read in the task's \fBtimezone\fR: five fields (minute, hour, day of month, month, day of week) or six with a leading seconds field. Lists (\fB1,15\fR), ranges (\fB1\-5\fR) and steps (\fB*/10\fR) in every field; month and day names (\fBJAN\fR, \fBMON\fR); \fBL\fR, \fInW\fR, \fIn#k\fR, \fInL\fR and \fB?\fR in the day fields; \fB@yearly\fR, \fB@annually\fR, \fB@monthly\fR, \fB@weekly\fR, \fB@daily\fR, \fB@midnight\fR, \fB@hourly\fR. If both day fields are restricted they combine with OR, as in cronie. \fB@reboot\fR and expressions that can never fire are refused. \fB"@every 15m"\fR (any duration from \fB1s\fR, whole seconds) ticks at the multiples of the interval since the Unix epoch, the same instants on every node and in every zone; \fB"@every 1h/10m"\fR shifts them by an offset smaller than the interval. An array of expressions (\fB["0 9 * * MON\-FRI", "0 12 * * SAT"]\fR, intervals may mix in) fires at their union, an instant two share once; an empty array is refused. Check one with \fBzkcron schedule\fR."#,
    ),
    (
        "command",
        r#"(array of strings, or string, required) An array is executed directly, \fIargv[0]\fR looked up in \fBPATH\fR; a string is run by \fB/bin/sh \-c\fR. The job runs in its own process group with standard input from \fI/dev/null\fR; its output goes to the daemon's log."#,
    ),
    ("description", r#"(string) Shown in logs and listings."#),
    (
        "active_from",
        r#"(RFC 3339 instant with an offset, quoted or not; default: none) No tick before it (a tick at it fires); \fBcatch_up\fR never reaches before it. \fBzkcron status\fR and \fBzkcron next\fR say "starts at" until then."#,
    ),
    (
        "active_until",
        r#"(RFC 3339 instant, after \fBactive_from\fR; default: none) No tick after it (a tick at it fires). Then the task fires no more: the leader logs it once, and \fBstatus\fR and \fBnext\fR say "ended at", not as a problem."#,
    ),
    (
        "timezone",
        r#"(IANA zone name; default: \fB[scheduler] default_timezone\fR, UTC) The zone the schedule's cron expressions are read in; set next to \fB@every\fR intervals alone it is refused (they read no zone). A fixed\-time schedule fires a time skipped by a daylight\-saving change at the first valid instant after the gap, and a repeated time once; a schedule whose second, minute or hour field starts with \fB*\fR keeps its real\-time rhythm."#,
    ),
    (
        "exclude",
        r#"(array of calendar names; default: none) No tick in a day or period of these calendars runs: files \fINAME\fB.toml\fR in the calendars dir (\fB[scheduler] calendars_dir\fR, \fB\-\-calendars\-dir\fR, else \fIcalendars.d\fR beside the jobs dir) with an optional \fBtimezone\fR (default UTC), \fBdates\fR (whole local days, \fB"2026\-12\-25"\fR) and \fBperiods\fR (local, from included, until not: \fB[["2026\-12\-31T18:00", "2027\-01\-02T00:00"]]\fR). An unknown name is an error at its place; the calendars are part of the task's definition (nodes that disagree show as drift); \fBhistory \-\-ticks\fR says \fBexcluded\fR and names the calendar; \fBzkcron schedule EXPR \-\-exclude CAL\fR and \fBzkcron next TASK\fR show the ticks a calendar removes."#,
    ),
    (
        "max_runs",
        r#"(integer from 1; default: none) At most this many scheduled ticks run, counted in the fire record by the claims themselves, so that no failover, restart or lost reply runs one more; then the task is done, and \fBstatus\fR says "done after N runs". For a task on every node or split into work items, each node's or item's runs are counted. Manual runs (\fBzkcron trigger\fR), backfills and chained runs do not count."#,
    ),
    (
        "dst_gap",
        r#"(\fB"run_after"\fR or \fB"skip"\fR; default: cronie's rule for the expression) What a local time that a spring\-forward change skips does: run at the first instant after the gap, or not run. Refused next to a schedule without a cron expression. \fBzkcron schedule EXPR \-\-tz ZONE \-\-dst\fR lists the ticks of the next 12 months that a change moves, skips or doubles; \fBvalidate\fR notes each task that has one."#,
    ),
    (
        "dst_repeat",
        r#"(\fB"first"\fR or \fB"both"\fR; default: cronie's rule for the expression) What a local time that a fall\-back change repeats does: run once, at its first pass, or at both."#,
    ),
    (
        "user",
        r#"(user name; default: \fB[scheduler] default_user\fR, else the daemon's own user) Run as this user; the daemon must be root to switch."#,
    ),
    (
        "group",
        r#"(group name; default: the user's primary group) Run with this group."#,
    ),
    (
        "working_dir",
        r#"(absolute path; default: the user's home, else \fI/\fR) The job's working directory."#,
    ),
    (
        "env",
        r#"(table of strings; default: empty) Added to the job's environment after the variables zkcron sets; names may not start with \fBZKCRON_\fR. In a cluster the values are never published, not even hashed."#,
    ),
    (
        "timeout",
        r#"(duration; default: none) Then SIGTERM to the job's process group, and SIGKILL after \fBkill_grace\fR."#,
    ),
    (
        "kill_grace",
        r#"(duration; default: \fB10s\fR) Time between SIGTERM and SIGKILL when a run is stopped."#,
    ),
    (
        "overlap",
        r#"(\fBskip\fR, \fBallow\fR or \fBreplace\fR; default: \fBskip\fR) While an earlier run of the task is live on any node, retries included: skip the tick, run beside it, or stop it and then run the tick."#,
    ),
    (
        "catch_up",
        r#"(\fBskip\fR, \fBonce\fR or \fBall\fR; default: \fBonce\fR) Ticks missed while no node fired: drop them, run the latest, or run each (at most 100)."#,
    ),
    (
        "starting_deadline",
        r#"(duration; default: none) A tick older than this is never run."#,
    ),
    (
        "jitter",
        r#"(duration; default: \fB0s\fR) A delay in [0, \fIjitter\fR) added to each fire, the same on every node for a given tick."#,
    ),
    (
        "retries",
        r#"(table; default: \fB{ attempts = 0, backoff = "10s", max_backoff = "10m" }\fR) Rerun a failed attempt up to \fBattempts\fR more times; the delay doubles from \fBbackoff\fR up to \fBmax_backoff\fR. No retry starts once zkcron is stopping or the task was removed."#,
    ),
    (
        "version_req",
        r#"(semver requirement; default: none) Only nodes whose release matches may own the task (cluster backend)."#,
    ),
    (
        "require_labels",
        r#"(table of strings; default: empty) Only nodes whose \fB[node] labels\fR contain every pair may own the task, e.g. \fB{ zone = "eu" }\fR (cluster backend)."#,
    ),
    (
        "on_node_loss",
        r#"(\fBskip\fR or \fBrerun\fR; default: \fBskip\fR) A tick whose node died before or during its run: leave it (at most once) or run it again on the new leader (at least once)."#,
    ),
    (
        "kill_on_session_loss",
        r#"(bool; default: \fBfalse\fR) Stop this task's runs when the node loses its ZooKeeper session (another node may run the task then)."#,
    ),
    (
        "enabled",
        r#"(bool; default: \fBtrue\fR) A disabled task is validated but never fires."#,
    ),
    (
        "on_failure",
        r#"(array of strings; default: none) A command (argv form) run by the node that ran the job when its last attempt failed (a non\-zero exit, a signal, a timeout, or a process that could not start), with \fBZKCRON_TASK\fR, \fBZKCRON_FIRE_ID\fR, \fBZKCRON_EXIT_CODE\fR or \fBZKCRON_SIGNAL\fR and \fBZKCRON_OUTPUT_TAIL\fR in its environment. It is never retried; its own failure is logged."#,
    ),
    (
        "work_items",
        r#"(integer 1\-1024, or array of names; default: none) A work pool: \fB16\fR is the items "0" to "15"; names match \fB[a\-z0\-9][a\-z0\-9._\-]{0,99}\fR, at most 1024, none twice. Each tick runs every item once, the run told its items in \fBZKCRON_WORK_ITEMS\fR. The embedded backend runs one run per tick with every item; in a cluster the items are split over the eligible nodes (even shares, by rendezvous hashing), each node runs once per tick with the items it owns, and each (tick, item) runs at most once."#,
    ),
    (
        "run_on",
        r#"(\fBleader\fR or \fBevery_node\fR; default: \fBleader\fR) \fBevery_node\fR runs each tick on every node; on the embedded backend that is the one host. In a cluster each eligible node claims and runs its own ticks, catching its missed ones up when it returns. Not together with \fBwork_items\fR."#,
    ),
    (
        "pause_on_failure",
        r#"(bool; default: \fBfalse\fR) When a run's last attempt fails, the task is paused cluster\-wide as by \fBzkcron pause\fR, with the failed run's fire id and exit code or signal as the reason, until \fBzkcron resume\fR."#,
    ),
    (
        "after",
        r#"(array of task names; default: none) Chaining: every successful run of each named task (scheduled, manual or backfill) causes exactly one run of this task, on its leader, with the parent's \fBZKCRON_SCHEDULED_AT\fR and the fire id \fItask\fR\fB@after\-\fR\fIparent's fire id\fR (\fBload@after\-extract@1767225600\fR). A pooled parent's run (\fBwork_items\fR) causes one run per item it ran, with the fire id \fItask\fR\fB@item\-\fR\fIitem\fR\fB@after\-\fR\fIparent's fire id\fR and the item in \fBZKCRON_AFTER_ITEM\fR. The request is stored in the same atomic write as the parent's result, so a node lost right after the parent succeeded loses no child run. A task with \fBafter\fR needs no \fBschedule\fR; with one it runs on both. A name that is no task of the jobs dir, the task itself, a name given twice, a task with \fBrun_on = "every_node"\fR and a cycle are errors of this task alone."#,
    ),
];

/// Writes `zkcron-task(5)`, the task-file format, in roff: every key of [`TASK_PAGE_KEYS`],
/// the file rules, the job's environment and an example.
pub fn write_task_page(out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        ".TH ZKCRON\\-TASK 5 \"\" \"zkcron {}\" \"zkcron manual\"",
        env!("CARGO_PKG_VERSION")
    )?;
    out.write_all(TASK_PAGE_HEAD.as_bytes())?;
    for (key, text) in TASK_PAGE_KEYS {
        writeln!(out, ".TP\n\\fB{}\\fR\n{text}", escape(key))?;
    }
    out.write_all(TASK_PAGE_TAIL.as_bytes())
}

const TASK_PAGE_HEAD: &str = r#".SH NAME
zkcron\-task \- the task files of zkcron(1)
.SH SYNOPSIS
\fI/etc/zkcron/jobs.d/\fRNAME\fI.toml\fR
.SH DESCRIPTION
Each task of \fBzkcron\fR(1) is one TOML file in the jobs directory (\fB[scheduler] jobs_dir\fR, by default \fI/etc/zkcron/jobs.d\fR), the same on every node of a cluster. The task's name is the file's stem and must match \fB[a\-z0\-9][a\-z0\-9._\-]{0,99}\fR. The daemon picks up changes by itself (\fBsystemctl reload zkcron\fR re\-reads at once); check files with \fBzkcron validate\fR.
.PP
Files not ending in \fI.toml\fR, hidden files, editor backups and package\-manager leftovers (\fI*.dpkg\-old\fR, \fI*.rpmnew\fR, ...) are ignored; subdirectories are not read. Files over 1 MiB, files that are not UTF\-8, and anything named \fINAME\fR.toml that is not a regular file (or a symbolic link to one in the same directory) are refused. Because the daemon runs these commands, often as root, it refuses a task file that is group\- or world\-writable or not owned by root, and a jobs directory (or a parent of it) that others may write.
.PP
Unknown keys are errors, with a did\-you\-mean; every error names the file, line and column. A task whose file becomes invalid keeps its last good version. Durations are written like \fB"90s"\fR, \fB"15m"\fR, \fB"2h"\fR, \fB"1h 30m"\fR.
.SH KEYS
"#;

const TASK_PAGE_TAIL: &str = r#".SH ENVIRONMENT
A job starts from a clean environment, as under cron: \fBPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\fR, and \fBHOME\fR, \fBUSER\fR, \fBLOGNAME\fR and \fBSHELL=/bin/sh\fR of its user, \fBLANG\fR if zkcron has it, then:
.TP
\fBZKCRON_TASK\fR
The task name.
.TP
\fBZKCRON_SCHEDULED_AT\fR
The tick, RFC 3339 in UTC, not the (jittered, possibly late) start time.
.TP
\fBZKCRON_FIRE_ID\fR
\fItask\fR@\fIunix\-seconds\fR, the same on every node: use it to make a job idempotent. A backfill's run (\fBzkcron backfill\fR) has \fItask\fR@backfill\-\fIn\fR\-\fIunix\-seconds\fR and its historic tick as \fBZKCRON_SCHEDULED_AT\fR.
.TP
\fBZKCRON_NODE\fR
The node id.
.TP
\fBZKCRON_ATTEMPT\fR
1 for the first try, 2 for the first retry, ...
.TP
\fBZKCRON_WORK_ITEMS\fR, \fBZKCRON_WORK_TOTAL\fR
Only for a task with \fBwork_items\fR: the run's items, comma\-separated in the task file's order, and the number of items in the pool.
.TP
\fBZKCRON_AFTER_ITEM\fR
Only for a run chained (\fBafter\fR) after a pooled parent: the parent's item it follows.
.PP
and finally the task's \fBenv\fR.
.SH EXAMPLE
.nf
# /etc/zkcron/jobs.d/nightly\-backup.toml
description = "Full backup of the orders database"
schedule = "30 2 * * *"
timezone = "Europe/Berlin"
command = ["/usr/local/bin/backup", "\-\-full"]
user = "backup"
timeout = "2h"
retries = { attempts = 2, backoff = "30s" }
.fi
.SH FILES
.TP
\fI/etc/zkcron/jobs.d/\fR
The default jobs directory. Purging the package leaves the task files you wrote there.
.SH "SEE ALSO"
\fBzkcron\fR(1), \fBcrontab\fR(5), \fBsystemd.time\fR(7)
"#;

/// The completion script of `command` (`Cli::command()`) for `shell`, to be installed where the shell looks for it. Rendered
/// into memory first: clap_complete panics on a failed write, and stdout may be full or closed.
pub fn completions(mut command: clap::Command, shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "zkcron", &mut script);
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_protects_hyphens_backslashes_and_leading_dots() {
        assert_eq!(escape("--config"), "\\-\\-config");
        assert_eq!(escape("a\\b"), "a\\eb");
        assert_eq!(escape(".hidden\n'quoted"), "\\&.hidden\n\\&'quoted");
    }
}
