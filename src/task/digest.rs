//! The canonical digest of a task's definition: what the cluster publishes so that operators
//! (and nodes) can tell nodes that load different definitions of one task apart.
//!
//! It is computed from an explicit serialization, never from `Debug` output (which is free to
//! change between releases or compiler versions), so every release that writes the same
//! version of this format gives the same digest for the same task: a cluster that mixes
//! releases during an upgrade does not see false disagreements.
//!
//! # The serialization, version 1
//! The header line `zkcron task digest v1`, then one line per field, in this order, each
//! `<field>=<value>` followed by `\n`:
//!
//! | field | value |
//! |---|---|
//! | `name` | str |
//! | `schedule` | str: the expression as written, runs of whitespace made one space (aliases such as `@daily` are not expanded); a list: `list <n>` and then ` <str>` per expression, in the file's order; none (a task with only `after`): `list 0` |
//! | `timezone` | str: the IANA name |
//! | `command` | `argv <n>` and then ` <str>` per argument, or `shell <str>` |
//! | `user`, `group` | opt str |
//! | `working_dir` | opt str (the path's bytes) |
//! | `env` | `<n>` and then ` <str>` per variable: its **name only**, in byte order; values are left out (below) |
//! | `timeout` | opt dur |
//! | `kill_grace` | dur |
//! | `overlap` | `skip`, `allow`, `replace` or `queue` (added after the first release) |
//! | `catch_up` | `skip`, `once` or `all` |
//! | `starting_deadline` | opt dur |
//! | `jitter` | dur |
//! | `retries` | `<attempts> <dur backoff> <dur max_backoff>` |
//! | `version_req` | opt str: the requirement as `semver` prints it |
//! | `kill_on_session_loss` | `true` or `false` |
//! | `on_node_loss` | `skip` or `rerun` |
//! | `enabled` | `true` or `false` |
//! | `require_labels` | **only when the task has any** (added after the first release): `<n>` and then ` <str> <str>` per pair, name and value, names in byte order |
//!
//! | `on_failure` | **only when the task has it** (added after the first release): `<n>` and then ` <str>` per argument |
//! | `run_on` | **only when it is `every_node`** (added after the first release): `every_node` |
//! | `work_items` | **only when the task has them** (added after the first release): `<n>` and then ` <str>` per item, in the file's order (`work_items = 3` is `3 1:0 1:1 1:2`) |
//! | `pause_on_failure` | **only when `true`** (added after the first release): `true` |
//! | `after` | **only when the task has it** (added after the first release): `<n>` and then ` <str>` per task, in the file's order |
//! | `active_from`, `active_until` | **only when the task has it** (added after the first release): str: the instant in UTC, RFC 3339 (`2026-12-01T00:00:00Z`, fractions of a second only when there are any) |
//! | `exclude` | **only when the task has it** (added after the first release): `<n>` and then ` <str> <str>` per calendar, its name and its content's digest (`Calendar::digest`), in the file's order |
//! | `max_runs` | **only when the task has it** (added after the first release): the number |
//! | `dst_gap`, `dst_repeat` | **only when the task sets it** (added after the first release): `run_after` or `skip`; `first` or `both` |
//!
//! `require_labels` (and likewise the later fields) is written only when the task requires labels, so a task without them
//! keeps the digest it had before the key existed (a cluster of old and new releases agrees on
//! every such task); a task with them cannot be defined on an old release at all (it refuses
//! the unknown key). Label values are not secret, so they count.
//!
//! A str is its length in bytes (decimal), `:`, and its UTF-8 bytes — so no value needs
//! escaping and none can be mistaken for a separator. An opt is `-` when absent. A dur is whole
//! nanoseconds in decimal followed by `ns`. Numbers are decimal without leading zeros.
//!
//! Left out: the file path (nodes keep jobs dirs in different places), the `description` (it
//! changes no behaviour), and the `env` values. The digest is the 64-bit xxh3 (a hash with a
//! fixed specification) of these bytes, as 16 lowercase hex digits. Any change to the fields,
//! their order or their encoding is a new version of this format, with its own header line.
//!
//! # Why the `env` values are left out
//! The digest is published in the task set (`tasksets/<digest>-<i>` in ZooKeeper), which any
//! client of the ensemble can read: zkcron creates its znodes readable by anyone. `env` is where
//! secrets go (`PGPASSWORD`, tokens), and a secret is often guessable from a list or short
//! enough to search, so a hash of it is as good as the secret to anyone who can test guesses
//! against it. A salt does not change that unless the salt itself is secret: every node of a
//! cluster must compute the same digest, so the salt would have to be something all nodes
//! agree on — the cluster name, a value stored in ZooKeeper — and whoever reads the digest can
//! read that too. zkcron has no secret shared by all nodes of a cluster (ZooKeeper
//! authentication, when configured, may differ per node), and adding one only for this would
//! be a new key to distribute. So the values are not part of the digest at all; the names are,
//! so a variable added or removed on one node still shows. Two nodes whose task files differ
//! only in an `env` value publish the same digest: compare those files with your configuration
//! management. (The same caution applies to secrets on the command line: the command is part
//! of the digest, and anyone on the host can read it in `ps`; pass secrets through `env` or a
//! file.)

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use super::{CatchUpPolicy, CommandLine, NodeLossPolicy, OverlapPolicy, RunOn, TaskSpec};
use crate::schedule::Schedule;

/// The first line of version 1 of the serialization.
const HEADER: &str = "zkcron task digest v1\n";

impl TaskSpec {
    /// The canonical serialization of this task's definition (see the module documentation).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Most tasks' serialization is a few hundred bytes: one allocation.
        let mut out = Canonical(Vec::with_capacity(512));
        out.raw(HEADER);
        self.write_what_runs(&mut out);
        self.write_process(&mut out);
        self.write_policies(&mut out);
        self.write_later_fields(&mut out);
        self.write_window(&mut out);
        out.0
    }

    /// `name`, `schedule`, `timezone` and `command`: what runs when.
    fn write_what_runs(&self, out: &mut Canonical) {
        out.field("name", |o| o.str(self.name.as_bytes()));
        out.field("schedule", |o| write_schedule(o, &self.schedule));
        out.field("timezone", |o| {
            o.str(self.schedule.timezone().name().as_bytes())
        });
        out.field("command", |o| match &self.command {
            CommandLine::Argv(argv) => {
                o.raw("argv ");
                o.number(argv.len());
                for arg in argv {
                    o.raw(" ");
                    o.str(arg.as_bytes());
                }
            }
            CommandLine::Shell(script) => {
                o.raw("shell ");
                o.str(script.as_bytes());
            }
        });
    }

    /// `user` to `kill_grace`: the process's identity, place, environment and time limits.
    fn write_process(&self, out: &mut Canonical) {
        out.field("user", |o| {
            o.opt_str(self.user.as_deref().map(str::as_bytes))
        });
        out.field("group", |o| {
            o.opt_str(self.extras.group.as_deref().map(str::as_bytes))
        });
        out.field("working_dir", |o| {
            o.opt_str(
                self.extras
                    .working_dir
                    .as_deref()
                    .map(|p| p.as_os_str().as_bytes()),
            )
        });
        out.field("env", |o| {
            o.number(self.extras.env.len());
            // A BTreeMap of Strings iterates in byte order.
            for name in self.extras.env.keys() {
                o.raw(" ");
                o.str(name.as_bytes());
            }
        });
        out.field("timeout", |o| o.opt_dur(self.extras.timeout));
        out.field("kill_grace", |o| o.dur(self.extras.kill_grace));
    }

    /// `overlap` to `enabled`: how the cluster fires the task.
    fn write_policies(&self, out: &mut Canonical) {
        out.field("overlap", |o| {
            o.raw(match self.overlap {
                OverlapPolicy::Skip => "skip",
                OverlapPolicy::Allow => "allow",
                OverlapPolicy::Replace => "replace",
                OverlapPolicy::Queue => "queue",
            })
        });
        out.field("catch_up", |o| {
            o.raw(match self.catch_up {
                CatchUpPolicy::Skip => "skip",
                CatchUpPolicy::Once => "once",
                CatchUpPolicy::All => "all",
            })
        });
        out.field("starting_deadline", |o| {
            o.opt_dur(self.extras.starting_deadline)
        });
        out.field("jitter", |o| o.dur(self.jitter));
        out.field("retries", |o| {
            o.number(self.extras.retries.attempts);
            o.raw(" ");
            o.dur(self.extras.retries.backoff);
            o.raw(" ");
            o.dur(self.extras.retries.max_backoff);
        });
        let version_req = self.extras.version_req.as_ref().map(|r| r.to_string());
        out.field("version_req", |o| {
            o.opt_str(version_req.as_deref().map(str::as_bytes))
        });
        out.field("kill_on_session_loss", |o| {
            o.boolean(self.kill_on_session_loss)
        });
        out.field("on_node_loss", |o| {
            o.raw(match self.on_node_loss {
                NodeLossPolicy::Skip => "skip",
                NodeLossPolicy::Rerun => "rerun",
            })
        });
        out.field("enabled", |o| o.boolean(self.enabled));
    }

    /// `require_labels`, `on_failure`, `run_on`, `work_items` and `pause_on_failure`, each
    /// written only when the task has it, so that a task without them keeps the digest it had
    /// before the key existed.
    fn write_later_fields(&self, out: &mut Canonical) {
        if !self.extras.require_labels.is_empty() {
            out.field("require_labels", |o| {
                o.number(self.extras.require_labels.len());
                for (name, value) in &self.extras.require_labels {
                    o.raw(" ");
                    o.str(name.as_bytes());
                    o.raw(" ");
                    o.str(value.as_bytes());
                }
            });
        }
        if let Some(argv) = &self.extras.on_failure {
            out.field("on_failure", |o| {
                o.number(argv.len());
                for arg in argv {
                    o.raw(" ");
                    o.str(arg.as_bytes());
                }
            });
        }
        match &self.extras.run_on {
            RunOn::Leader => {}
            RunOn::EveryNode => out.field("run_on", |o| o.raw("every_node")),
            RunOn::Items(items) => out.field("work_items", |o| {
                o.number(items.len());
                for item in items.iter() {
                    o.raw(" ");
                    o.str(item.as_bytes());
                }
            }),
        }
        if self.extras.pause_on_failure {
            out.field("pause_on_failure", |o| o.raw("true"));
        }
        let exclude = self.schedule.exclusions();
        if !exclude.is_empty() {
            out.field("exclude", |o| {
                o.number(exclude.len());
                for calendar in exclude {
                    o.raw(" ");
                    o.str(calendar.name.as_bytes());
                    o.raw(" ");
                    o.str(calendar.digest().as_bytes());
                }
            });
        }
        if let Some(max_runs) = self.extras.max_runs {
            out.field("max_runs", |o| o.number(max_runs as usize));
        }
        if !self.extras.after.is_empty() {
            out.field("after", |o| {
                o.number(self.extras.after.len());
                for parent in &self.extras.after {
                    o.raw(" ");
                    o.str(parent.name.as_bytes());
                }
            });
        }
    }

    /// `active_from`, `active_until`, `dst_gap` and `dst_repeat`, each written only when the
    /// task has it.
    fn write_window(&self, out: &mut Canonical) {
        let window = self.schedule.window();
        let instant = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
        if let Some(from) = window.from {
            out.field("active_from", |o| o.str(instant(from).as_bytes()));
        }
        if let Some(until) = window.until {
            out.field("active_until", |o| o.str(instant(until).as_bytes()));
        }
        let dst = self.schedule.dst();
        if let Some(gap) = dst.gap {
            out.field("dst_gap", |o| o.raw(gap.as_str()));
        }
        if let Some(repeat) = dst.repeat {
            out.field("dst_repeat", |o| o.raw(repeat.as_str()));
        }
    }

    /// The digest of [`TaskSpec::canonical_bytes`]: 16 lowercase hex digits of its xxh3-64. The
    /// same for the same definition on every node and in every release that writes version 1
    /// of the serialization; `env` values and the file path do not count. Worked out from the
    /// fields on every call: [`TaskSpec::digest`] is the same, kept.
    pub fn canonical_digest(&self) -> String {
        hex(self.canonical_hash())
    }

    /// The xxh3-64 of [`TaskSpec::canonical_bytes`].
    fn canonical_hash(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.canonical_bytes())
    }

    /// [`TaskSpec::canonical_digest`], worked out once per spec and then kept: a load works it
    /// out ([`TaskSpec::with_digest`]), so publishing the task set or answering `zkcron status`
    /// does not serialize and hash every task again. A debug build checks each use against
    /// the fields.
    pub fn digest(&self) -> String {
        hex(self.kept_hash())
    }

    /// This spec with its digest worked out (what a load hands on).
    pub fn with_digest(self) -> TaskSpec {
        self.kept_hash();
        self
    }

    fn kept_hash(&self) -> u64 {
        let kept = self.digest.0.load(Ordering::Relaxed);
        let hash = if kept != UNKNOWN {
            kept
        } else {
            let hash = self.canonical_hash();
            self.digest.0.store(hash, Ordering::Relaxed);
            hash
        };
        debug_assert_eq!(
            hash,
            self.canonical_hash(),
            "task {}: the kept digest is not its fields' (a field changed after it was worked \
             out: give the changed spec a new KeptDigest)",
            self.name
        );
        hash
    }
}

/// A digest as 16 lowercase hex digits.
fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// What [`KeptDigest`] holds before the digest is worked out. A task whose xxh3-64 is this
/// value (one in 2^64) has it worked out at each use: slower, never wrong.
const UNKNOWN: u64 = 0;

/// A task's canonical digest kept beside the fields it comes from ([`TaskSpec::digest`]): not
/// yet worked out (the default, for a spec made field by field), or worked out. It follows from
/// the other fields, so it is left out of equality: specs with equal fields have equal digests
/// and compare equal whether or not either has worked its digest out. A clone keeps it, so a
/// spec whose fields are changed after its digest was worked out gets a new one
/// (`KeptDigest::default()`). Eight bytes per task.
#[derive(Default)]
pub struct KeptDigest(AtomicU64);

impl Clone for KeptDigest {
    fn clone(&self) -> KeptDigest {
        KeptDigest(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for KeptDigest {
    /// Always: the digest is not part of a spec's equality (see [`KeptDigest`]).
    fn eq(&self, _: &KeptDigest) -> bool {
        true
    }
}

impl fmt::Debug for KeptDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.load(Ordering::Relaxed) {
            UNKNOWN => f.write_str("KeptDigest(not worked out)"),
            hash => write!(f, "KeptDigest({})", hex(hash)),
        }
    }
}

/// A schedule's value: one expression as a str with runs of whitespace made one space, or a
/// list as `list <n>` and then ` <str>` per expression (so no list reads as one expression).
fn write_schedule(out: &mut Canonical, schedule: &Schedule) {
    let expressions = schedule.expressions();
    if !schedule.is_list() {
        return out.normal_str(expressions[0]);
    }
    out.raw("list ");
    out.number(expressions.len());
    for expression in expressions {
        out.raw(" ");
        out.normal_str(expression);
    }
}

/// The serialization being written.
struct Canonical(Vec<u8>);

impl Canonical {
    fn field(&mut self, name: &str, value: impl FnOnce(&mut Canonical)) {
        self.raw(name);
        self.raw("=");
        value(self);
        self.raw("\n");
    }

    fn raw(&mut self, text: &str) {
        self.0.extend_from_slice(text.as_bytes());
    }

    /// A number in decimal, written in place (a digest is worked out per task at every load).
    fn number(&mut self, number: impl fmt::Display) {
        use std::io::Write;
        write!(self.0, "{number}").expect("a Vec takes every write");
    }

    fn boolean(&mut self, value: bool) {
        self.raw(if value { "true" } else { "false" });
    }

    fn str(&mut self, bytes: &[u8]) {
        self.number(bytes.len());
        self.raw(":");
        self.0.extend_from_slice(bytes);
    }

    /// `expression` as a str, its runs of whitespace made one space (and none at either end).
    fn normal_str(&mut self, expression: &str) {
        let words = expression.split_whitespace();
        let length = words.clone().map(|word| word.len() + 1).sum::<usize>();
        self.number(length.saturating_sub(1));
        self.raw(":");
        for (i, word) in words.enumerate() {
            if i > 0 {
                self.raw(" ");
            }
            self.raw(word);
        }
    }

    fn opt_str(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            Some(bytes) => self.str(bytes),
            None => self.raw("-"),
        }
    }

    fn dur(&mut self, duration: Duration) {
        self.number(duration.as_nanos());
        self.raw("ns");
    }

    fn opt_dur(&mut self, duration: Option<Duration>) {
        match duration {
            Some(duration) => self.dur(duration),
            None => self.raw("-"),
        }
    }
}
