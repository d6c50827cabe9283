//! The operator's requests on the embedded backend, every kind in one store: manual runs
//! (`zkcron trigger`), chained runs (`after` a parent's success) and backfills of a range
//! (`zkcron backfill`), each a [`RequestRecord`], its kind as data. Each kind keeps the file it
//! had, in the format it had (a state dir this release wrote is still one the releases before
//! open: they read `snapshot.json` and `journal.jsonl`, whose formats are unchanged, and these):
//!
//! - `<state_dir>/triggers.json`: `{"format": 1, "next": N, "triggers": {fire id:
//!   TriggerRecord}}`: manual runs (`<task>@manual-<10 digits>`, numbered by `next`, never
//!   reused) and chained runs (`...@after-<the parent's fire id>`). A trigger still `running`
//!   when the daemon starts was cut short with the daemon: it is ended with that reason, never
//!   run again. Ended triggers go [`record::TRIGGER_KEEP_ENDED`] after their end.
//! - `<state_dir>/backfills.json`: `{"format": 1, "next": N, "backfills": {name:
//!   BackfillRecord}}` (`<task>@backfill-<10 digits>`). A tick still running when the daemon
//!   starts counts as failed and is not run again ([`backfill::lost`]); the request goes on
//!   with its next tick. Ended requests go [`backfill::KEEP_ENDED`] after their end.
//!
//! Every change is written atomically and synced before the request, claim, end or cancel
//! returns, and undone in memory when the write fails: a run (a backfill's tick) is claimed
//! once, also across restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::state::{KeptFile, read_state_file};
use super::{FORMAT_VERSION, by_task};
use crate::coord::backfill::{self, Backfill, BackfillRecord};
use crate::coord::operator::{self, RequestRecord};
use crate::coord::record::{self, Verdict};
use crate::coord::records::{HistoryEntry, TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, CoordError, RunResult, Trigger};

pub(super) const TRIGGERS: &str = "triggers.json";
pub(super) const BACKFILLS: &str = "backfills.json";

/// The kinds of request by the file that keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Manual and chained runs: `triggers.json`.
    Run,
    /// Backfills: `backfills.json`.
    Backfill,
}

impl Kind {
    fn of(record: &RequestRecord) -> Kind {
        match record {
            RequestRecord::Manual(_) => Kind::Run,
            RequestRecord::Backfill(_) => Kind::Backfill,
        }
    }

    fn file(self) -> &'static str {
        match self {
            Kind::Run => TRIGGERS,
            Kind::Backfill => BACKFILLS,
        }
    }
}

/// Either file as read: each holds one of the maps.
#[derive(Debug, Default, Deserialize)]
struct OnDisk {
    format: u32,
    #[serde(default)]
    next: u64,
    #[serde(default)]
    triggers: BTreeMap<String, TriggerRecord>,
    #[serde(default)]
    backfills: BTreeMap<String, BackfillRecord>,
}

/// Either file as written: its kind's map only.
#[derive(Serialize)]
struct Written<'a> {
    format: u32,
    next: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    triggers: Option<BTreeMap<&'a str, &'a TriggerRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backfills: Option<BTreeMap<&'a str, &'a BackfillRecord>>,
}

/// One kind's file in memory.
#[derive(Debug)]
struct RequestFile {
    kind: Kind,
    /// The number of the next request.
    next: u64,
    records: BTreeMap<String, RequestRecord>,
}

impl Serialize for RequestFile {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let triggers = self.records.iter().filter_map(|(name, r)| match r {
            RequestRecord::Manual(t) => Some((name.as_str(), t)),
            RequestRecord::Backfill(_) => None,
        });
        let backfills = self.records.iter().filter_map(|(name, r)| match r {
            RequestRecord::Backfill(b) => Some((name.as_str(), b)),
            RequestRecord::Manual(_) => None,
        });
        Written {
            format: FORMAT_VERSION,
            next: self.next,
            triggers: (self.kind == Kind::Run).then(|| triggers.collect()),
            backfills: (self.kind == Kind::Backfill).then(|| backfills.collect()),
        }
        .serialize(serializer)
    }
}

/// Changes to one file, each undone when the write fails.
struct Edit<'a> {
    file: &'a mut RequestFile,
    undo: Vec<(String, Option<RequestRecord>)>,
}

impl Edit<'_> {
    fn get(&self, name: &str) -> Option<&RequestRecord> {
        self.file.records.get(name)
    }

    fn set(&mut self, name: &str, record: RequestRecord) {
        let old = self.file.records.insert(name.to_string(), record);
        self.undo.push((name.to_string(), old));
    }
}

/// One kind's file, kept.
struct Shelf {
    file: KeptFile<RequestFile>,
}

impl Shelf {
    /// Reads `kind`'s file: what a daemon that ended left running is ended now.
    fn open(state_dir: &Path, kind: Kind, now: DateTime<Utc>) -> Result<Shelf, CoordError> {
        let read = read_state_file::<OnDisk>(state_dir, kind.file(), |f| f.format, now)?;
        let triggers = read
            .triggers
            .into_iter()
            .map(|(name, t)| (name, RequestRecord::Manual(t)));
        let backfills = read
            .backfills
            .into_iter()
            .map(|(name, b)| (name, RequestRecord::Backfill(b)));
        let mut file = RequestFile {
            kind,
            next: read.next,
            records: triggers.chain(backfills).collect(),
        };
        let mut changed = false;
        for (name, record) in file.records.iter_mut() {
            if let Some(ended) = stopped(name, record, now) {
                *record = ended;
                changed = true;
            }
        }
        changed |= collect(&mut file, now);
        Ok(Shelf {
            file: KeptFile::new(state_dir, kind.file(), file, changed)?,
        })
    }

    /// Makes `change` durably (ended records past their time go too when `collect_at`): the
    /// file is written if it set a record, and what it set undone if the write fails.
    fn write<T>(
        &self,
        collect_at: Option<DateTime<Utc>>,
        change: impl FnOnce(&mut Edit<'_>) -> T,
    ) -> Result<T, CoordError> {
        let mut file = self.file.lock();
        let next = file.next;
        let mut edit = Edit {
            file: &mut file,
            undo: Vec::new(),
        };
        let out = change(&mut edit);
        let undo = edit.undo;
        if undo.is_empty() {
            return Ok(out);
        }
        if let Some(now) = collect_at {
            collect(&mut file, now);
        }
        if let Err(error) = self.file.save(&file) {
            for (name, old) in undo.into_iter().rev() {
                match old {
                    Some(old) => file.records.insert(name, old),
                    None => file.records.remove(&name),
                };
            }
            file.next = next;
            return Err(error);
        }
        Ok(out)
    }

    fn get(&self, name: &str) -> Option<RequestRecord> {
        self.file.lock().records.get(name).cloned()
    }
}

/// The requests of one state dir, every kind.
pub(super) struct Requests {
    runs: Shelf,
    backfills: Shelf,
}

impl Requests {
    /// Reads `triggers.json` and `backfills.json`.
    pub(super) fn open(state_dir: &Path, now: DateTime<Utc>) -> Result<Requests, CoordError> {
        Ok(Requests {
            runs: Shelf::open(state_dir, Kind::Run, now)?,
            backfills: Shelf::open(state_dir, Kind::Backfill, now)?,
        })
    }

    fn shelf(&self, kind: Kind) -> &Shelf {
        match kind {
            Kind::Run => &self.runs,
            Kind::Backfill => &self.backfills,
        }
    }

    /// A new request (a [`operator::trigger`]'s or [`operator::backfill`]'s), numbered by its
    /// file, durable before it returns; its name.
    pub(super) fn request(
        &self,
        request: RequestRecord,
        now: DateTime<Utc>,
    ) -> Result<String, CoordError> {
        self.shelf(Kind::of(&request)).write(Some(now), |edit| {
            let name = request.name(edit.file.next);
            edit.file.next += 1;
            edit.set(&name, request);
            name
        })
    }

    /// A manual or chained run's trigger as kept.
    pub(super) fn trigger(&self, fire_id: &str) -> Option<TriggerRecord> {
        match self.runs.get(fire_id)? {
            RequestRecord::Manual(trigger) => Some(trigger),
            RequestRecord::Backfill(_) => None,
        }
    }

    /// Every backfill kept, by name.
    pub(super) fn backfills(&self) -> BTreeMap<String, BackfillRecord> {
        let file = self.backfills.file.lock();
        let backfills = file.records.iter().filter_map(|(name, r)| match r {
            RequestRecord::Backfill(b) => Some((name.clone(), b.clone())),
            RequestRecord::Manual(_) => None,
        });
        backfills.collect()
    }

    /// Cancels the backfill `name` ([`operator::cancelled`]); the record as it was, `None` if
    /// there is none.
    pub(super) fn cancel(
        &self,
        name: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<BackfillRecord>, CoordError> {
        self.backfills.write(None, |edit| {
            let Some(RequestRecord::Backfill(was)) = edit.get(name).cloned() else {
                return None;
            };
            if let Some(new) = operator::cancelled(&was, by, now) {
                edit.set(name, RequestRecord::Backfill(new));
            }
            Some(was)
        })
    }

    /// What the tasks in `tasks` have to claim, by task, oldest first: the pending runs and the
    /// backfills that want their next tick.
    pub(super) fn pending(&self, tasks: &BTreeSet<Arc<str>>) -> Pending {
        let (mut runs, mut backfills) = (Vec::new(), Vec::new());
        for shelf in [&self.runs, &self.backfills] {
            let file = shelf.file.lock();
            let of_tasks = file
                .records
                .iter()
                .filter(|(_, r)| tasks.contains(r.task()));
            for (name, record) in of_tasks {
                match record {
                    RequestRecord::Manual(t) if t.state == TriggerState::Pending => {
                        let request = Trigger {
                            fire_id: name.clone(),
                            requested_at: t.requested_at,
                        };
                        runs.push((t.task.clone(), request));
                    }
                    RequestRecord::Backfill(b) if b.wants_tick() => {
                        backfills.push((b.task.clone(), Backfill::of(name, b)));
                    }
                    _ => {}
                }
            }
        }
        Pending {
            runs: by_task(runs.into_iter()),
            backfills: by_task(backfills.into_iter()),
        }
    }

    /// Claims `trigger` of `task` (a run's or a backfill tick's fire id) for `node`, durably:
    /// [`record::admit_manual`], [`backfill::admit`].
    pub(super) fn claim(
        &self,
        task: &str,
        trigger: &Trigger,
        leads: bool,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, CoordError> {
        let (kind, name) = match backfill::of_fire_id(&trigger.fire_id) {
            Some((name, _)) => (Kind::Backfill, name),
            None => (Kind::Run, trigger.fire_id.as_str()),
        };
        self.shelf(kind).write(None, |edit| {
            let stored = edit.get(name).filter(|r| r.task() == task);
            match claimed(stored, trigger, leads, node, now) {
                Ok(new) => {
                    edit.set(name, new);
                    ClaimOutcome::Claimed
                }
                Err(outcome) => outcome,
            }
        })
    }

    /// Ends the request of the run `entry` (a manual or chained run's, a backfill tick's) with
    /// its result; a run's end adds the requests of the runs it causes (`chained`) in the same
    /// write.
    pub(super) fn end(
        &self,
        entry: &HistoryEntry,
        result: &RunResult,
        chained: Vec<(String, TriggerRecord)>,
        now: DateTime<Utc>,
    ) -> Result<(), CoordError> {
        let (kind, name) = match backfill::of_fire_id(&entry.fire_id).filter(|_| entry.backfill) {
            Some((name, _)) => (Kind::Backfill, name),
            None => (Kind::Run, entry.fire_id.as_str()),
        };
        self.shelf(kind).write(Some(now), |edit| {
            let Some(stored) = edit.get(name) else {
                return;
            };
            let new = ended(stored, entry, result, now);
            if new != *stored {
                edit.set(name, new);
            }
            add_chained(edit, chained);
        })
    }

    /// Adds the requests of chained runs (`after`) that are not there yet, durably: a request
    /// made already (by an earlier attempt at the parent's end) is not made again.
    pub(super) fn request_chained(
        &self,
        chained: Vec<(String, TriggerRecord)>,
    ) -> Result<(), CoordError> {
        self.runs.write(None, |edit| add_chained(edit, chained))
    }
}

/// What the tasks a backend leads have to claim ([`Requests::pending`]).
pub(super) struct Pending {
    pub(super) runs: BTreeMap<String, Vec<Trigger>>,
    pub(super) backfills: BTreeMap<String, Vec<Backfill>>,
}

/// The claim rule of each kind: `stored` once `node` claimed `trigger`, or why not.
fn claimed(
    stored: Option<&RequestRecord>,
    trigger: &Trigger,
    leads: bool,
    node: &str,
    now: DateTime<Utc>,
) -> Result<RequestRecord, ClaimOutcome> {
    if let Some((name, tick)) = backfill::of_fire_id(&trigger.fire_id) {
        let stored = match stored {
            Some(RequestRecord::Backfill(b)) => Some(b),
            _ => None,
        };
        if let Verdict::Refuse(outcome) = backfill::admit(leads, stored, tick, false) {
            return Err(outcome);
        }
        let by = backfill::Claimer {
            node,
            session: None,
        };
        let new = backfill::claimed(stored.expect("admitted"), name, tick, by, now);
        return Ok(RequestRecord::Backfill(new));
    }
    let pending = match stored {
        Some(RequestRecord::Manual(t)) if t.state == TriggerState::Pending => Some(t),
        _ => None,
    };
    let admitted = record::admit_manual(leads, pending.is_some(), trigger.requested_at);
    if let Verdict::Refuse(outcome) = admitted {
        return Err(outcome);
    }
    Ok(RequestRecord::Manual(TriggerRecord {
        state: TriggerState::Running,
        node: Some(node.to_string()),
        claimed_at: Some(now),
        ..pending.expect("admitted").clone()
    }))
}

/// The end rule of each kind: `stored` once its run `entry` ended as `result` says.
fn ended(
    stored: &RequestRecord,
    entry: &HistoryEntry,
    result: &RunResult,
    now: DateTime<Utc>,
) -> RequestRecord {
    match stored {
        RequestRecord::Backfill(b) => {
            RequestRecord::Backfill(backfill::ended(b, entry, result.end_reason(), now))
        }
        RequestRecord::Manual(t) => RequestRecord::Manual(TriggerRecord {
            state: TriggerState::Ended,
            result: Some(entry.clone()),
            reason: result.end_reason().map(str::to_string),
            ..t.clone()
        }),
    }
}

/// `record` as the daemon finds it when it starts, if what ran of it was cut short with the
/// daemon before: a run ended with that reason, a backfill's tick failed (neither runs again).
fn stopped(name: &str, record: &RequestRecord, now: DateTime<Utc>) -> Option<RequestRecord> {
    match record {
        RequestRecord::Manual(t) if t.state == TriggerState::Running => {
            Some(RequestRecord::Manual(TriggerRecord {
                state: TriggerState::Ended,
                reason: Some(
                    "zkcron stopped while it ran; its end was not recorded (not run again)".into(),
                ),
                ..t.clone()
            }))
        }
        RequestRecord::Backfill(b) if b.running.is_some() => {
            let mut lost = backfill::lost(b, name, now);
            if let Some(failure) = lost.failures.last_mut() {
                *failure = failure.replace(
                    "was lost while running it",
                    "stopped (zkcron stopped while it ran)",
                );
            }
            Some(RequestRecord::Backfill(lost))
        }
        _ => None,
    }
}

/// Adds each of `chained` whose fire id is not there.
fn add_chained(edit: &mut Edit<'_>, chained: Vec<(String, TriggerRecord)>) {
    for (fire_id, record) in chained {
        if edit.get(&fire_id).is_none() {
            edit.set(&fire_id, RequestRecord::Manual(record));
        }
    }
}

/// Whether an ended request is past its time at `now`: a trigger
/// [`record::TRIGGER_KEEP_ENDED`] after its run's end (else its claim or request), a backfill
/// [`backfill::KEEP_ENDED`] after it ended.
fn expired(record: &RequestRecord, now: DateTime<Utc>) -> bool {
    match record {
        RequestRecord::Backfill(b) => backfill::expired(b, now),
        RequestRecord::Manual(t) if t.state == TriggerState::Ended => {
            let ended_at = match &t.result {
                Some(entry) => entry.started_at + TimeDelta::milliseconds(entry.duration_ms as i64),
                None => t.claimed_at.unwrap_or(t.requested_at),
            };
            record::trigger_expired(ended_at, now)
        }
        RequestRecord::Manual(_) => false,
    }
}

/// Drops the requests past their time; whether any went.
fn collect(file: &mut RequestFile, now: DateTime<Utc>) -> bool {
    let before = file.records.len();
    file.records.retain(|_, record| !expired(record, now));
    file.records.len() != before
}

#[cfg(test)]
mod tests;
