//! Manual runs and run history of the embedded backend, in files of their own (so a state dir
//! this release wrote is still one a release before manual runs opens: it reads only
//! `snapshot.json` and `journal.jsonl`, whose formats are unchanged).
//!
//! - `<state_dir>/triggers.json`: `{"format": 1, "next": N, "triggers": {fire id: TriggerRecord}}`.
//!   `next` numbers the manual fire ids (`<task>@manual-<10 digits>`, never reused). Written
//!   atomically and synced before a request or a claim returns: a manual run is claimed once,
//!   also across restarts. A trigger still `running` when the daemon starts was cut short with
//!   the daemon: it is ended with that reason, never run again. Ended triggers go
//!   [`record::TRIGGER_KEEP_ENDED`] after their end.
//!
//! The run histories (`<state_dir>/history/<task>.json`) are `history.rs`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, MutexGuard};

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::state::{KeptFile, read_state_file};
use super::{FORMAT_VERSION, by_task};
use crate::coord::operator;
use crate::coord::record::{self, Verdict};
use crate::coord::records::{HistoryEntry, TriggerRecord, TriggerState};
use crate::coord::{ClaimOutcome, CoordError, RunResult, Trigger};

pub(super) const TRIGGERS: &str = "triggers.json";

/// `triggers.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct TriggerFile {
    format: u32,
    /// The number of the next manual fire id.
    #[serde(default)]
    next: u64,
    #[serde(default)]
    triggers: BTreeMap<String, TriggerRecord>,
}

/// The manual runs and histories of one state dir.
pub(super) struct Manual {
    file: KeptFile<TriggerFile>,
}

impl Manual {
    /// Reads `triggers.json` (a trigger left running by a daemon that ended is ended now).
    pub(super) fn open(state_dir: &Path, now: DateTime<Utc>) -> Result<Manual, CoordError> {
        let mut file = read_state_file::<TriggerFile>(state_dir, TRIGGERS, |f| f.format)?;
        file.format = FORMAT_VERSION;
        let mut changed = false;
        for trigger in file.triggers.values_mut() {
            if trigger.state == TriggerState::Running {
                trigger.state = TriggerState::Ended;
                trigger.reason = Some(
                    "zkcron stopped while it ran; its end was not recorded (not run again)".into(),
                );
                changed = true;
            }
        }
        changed |= collect(&mut file, now);
        Ok(Manual {
            file: KeptFile::new(state_dir, TRIGGERS, file, changed)?,
        })
    }

    fn lock(&self) -> MutexGuard<'_, TriggerFile> {
        self.file.lock()
    }

    fn save(&self, file: &TriggerFile) -> Result<(), CoordError> {
        self.file.save(file)
    }

    /// A new pending manual run of `task`, durable before it returns.
    pub(super) fn request(
        &self,
        task: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Trigger, CoordError> {
        let mut file = self.lock();
        let fire_id = record::manual_fire_id(task, file.next);
        let trigger = operator::trigger(task, by, now);
        file.next += 1;
        file.triggers.insert(fire_id.clone(), trigger);
        collect(&mut file, now);
        if let Err(error) = self.save(&file) {
            file.triggers.remove(&fire_id);
            file.next -= 1;
            return Err(error);
        }
        Ok(Trigger {
            fire_id,
            requested_at: now,
        })
    }

    pub(super) fn state(&self, fire_id: &str) -> Option<TriggerRecord> {
        self.lock().triggers.get(fire_id).cloned()
    }

    /// The pending triggers of `tasks`, by task, oldest first.
    pub(super) fn pending(&self, tasks: &BTreeSet<Arc<str>>) -> BTreeMap<String, Vec<Trigger>> {
        let file = self.lock();
        let pending = file.triggers.iter().filter(|(_, trigger)| {
            trigger.state == TriggerState::Pending && tasks.contains(trigger.task.as_str())
        });
        by_task(pending.map(|(fire_id, trigger)| {
            let request = Trigger {
                fire_id: fire_id.clone(),
                requested_at: trigger.requested_at,
            };
            (trigger.task.clone(), request)
        }))
    }

    /// Claims a pending trigger for `node` (see [`record::admit_manual`]), durably.
    pub(super) fn claim(
        &self,
        task: &str,
        trigger: &Trigger,
        leads: bool,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, CoordError> {
        let mut file = self.lock();
        let stored = file
            .triggers
            .get(&trigger.fire_id)
            .filter(|t| t.task == task)
            .cloned();
        let pending = stored
            .as_ref()
            .is_some_and(|t| t.state == TriggerState::Pending);
        if let Verdict::Refuse(outcome) = record::admit_manual(leads, pending, trigger.requested_at)
        {
            return Ok(outcome);
        }
        let previous = stored.expect("pending");
        let running = TriggerRecord {
            state: TriggerState::Running,
            node: Some(node.to_string()),
            claimed_at: Some(now),
            ..previous.clone()
        };
        file.triggers.insert(trigger.fire_id.clone(), running);
        if let Err(error) = self.save(&file) {
            file.triggers.insert(trigger.fire_id.clone(), previous);
            return Err(error);
        }
        Ok(ClaimOutcome::Claimed)
    }

    /// Ends the trigger of a manual run with its result, and adds the requests of the runs
    /// it causes (`after`) in the same write.
    pub(super) fn end(
        &self,
        entry: &HistoryEntry,
        result: &RunResult,
        chained: Vec<(String, TriggerRecord)>,
        now: DateTime<Utc>,
    ) -> Result<(), CoordError> {
        let mut file = self.lock();
        let Some(trigger) = file.triggers.get_mut(&entry.fire_id) else {
            return Ok(());
        };
        let previous = trigger.clone();
        trigger.state = TriggerState::Ended;
        trigger.result = Some(entry.clone());
        trigger.reason = result.end_reason().map(str::to_string);
        let added = add_chained(&mut file, chained);
        collect(&mut file, now);
        if let Err(error) = self.save(&file) {
            file.triggers.insert(entry.fire_id.clone(), previous);
            for fire_id in added {
                file.triggers.remove(&fire_id);
            }
            return Err(error);
        }
        Ok(())
    }

    /// Adds the requests of chained runs (`after`) that are not there yet, durably: a request
    /// made already (by an earlier attempt at the parent's end) is not made again.
    pub(super) fn request_chained(
        &self,
        chained: Vec<(String, TriggerRecord)>,
    ) -> Result<(), CoordError> {
        let mut file = self.lock();
        let added = add_chained(&mut file, chained);
        if added.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.save(&file) {
            for fire_id in added {
                file.triggers.remove(&fire_id);
            }
            return Err(error);
        }
        Ok(())
    }
}

/// Adds each of `chained` whose fire id is not there; the fire ids added.
fn add_chained(file: &mut TriggerFile, chained: Vec<(String, TriggerRecord)>) -> Vec<String> {
    let mut added = Vec::new();
    for (fire_id, record) in chained {
        if let std::collections::btree_map::Entry::Vacant(slot) = file.triggers.entry(fire_id) {
            added.push(slot.key().clone());
            slot.insert(record);
        }
    }
    added
}

/// When a trigger ended: its run's end, else its claim or request.
fn ended_at(trigger: &TriggerRecord) -> DateTime<Utc> {
    match &trigger.result {
        Some(entry) => entry.started_at + TimeDelta::milliseconds(entry.duration_ms as i64),
        None => trigger.claimed_at.unwrap_or(trigger.requested_at),
    }
}

/// Drops ended triggers past [`record::TRIGGER_KEEP_ENDED`]; whether any went.
fn collect(file: &mut TriggerFile, now: DateTime<Utc>) -> bool {
    let before = file.triggers.len();
    file.triggers.retain(|_, trigger| {
        trigger.state != TriggerState::Ended || !record::trigger_expired(ended_at(trigger), now)
    });
    file.triggers.len() != before
}

#[cfg(test)]
#[path = "manual_tests.rs"]
mod tests;
