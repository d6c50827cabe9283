//! Backfills of the embedded backend, in a file of their own (a state dir this release wrote is
//! still one the previous release opens: it never reads this file).
//!
//! `<state_dir>/backfills.json`: `{"format": 1, "next": N, "backfills": {name: BackfillRecord}}`.
//! `next` numbers the requests (`<task>@backfill-<10 digits>`, never reused). Written
//! atomically and synced before a request, a claim, an end or a cancel returns: each tick's
//! claim moves the request's progress durably before its run starts, so a tick is run at most
//! once, also across restarts. A tick still running when the daemon starts was cut short with
//! the daemon: it counts as failed and is not run again ([`backfill::lost`]); the request goes
//! on with the next tick. Ended requests go [`backfill::KEEP_ENDED`] after their end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::state::{KeptFile, read_state_file};
use super::{FORMAT_VERSION, by_task};
use crate::coord::backfill::{self, Backfill, BackfillRecord};
use crate::coord::operator;
use crate::coord::record::Verdict;
use crate::coord::records::HistoryEntry;
use crate::coord::{ClaimOutcome, CoordError, RunResult, Trigger};

pub(super) const BACKFILLS: &str = "backfills.json";

/// `backfills.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct BackfillFile {
    format: u32,
    /// The number of the next request.
    #[serde(default)]
    next: u64,
    #[serde(default)]
    backfills: BTreeMap<String, BackfillRecord>,
}

/// The backfill requests of one state dir.
pub(super) struct Backfills {
    file: KeptFile<BackfillFile>,
}

impl Backfills {
    /// Reads `backfills.json` (a tick left running by a daemon that ended counts as failed).
    pub(super) fn open(state_dir: &Path, now: DateTime<Utc>) -> Result<Backfills, CoordError> {
        let mut file = read_state_file::<BackfillFile>(state_dir, BACKFILLS, |f| f.format)?;
        file.format = FORMAT_VERSION;
        let mut changed = false;
        for (name, record) in file.backfills.iter_mut() {
            if record.running.is_some() {
                *record = backfill::lost(record, name, now);
                if let Some(failure) = record.failures.last_mut() {
                    *failure = failure.replace(
                        "was lost while running it",
                        "stopped (zkcron stopped while it ran)",
                    );
                }
                changed = true;
            }
        }
        changed |= collect(&mut file, now);
        Ok(Backfills {
            file: KeptFile::new(state_dir, BACKFILLS, file, changed)?,
        })
    }

    fn lock(&self) -> MutexGuard<'_, BackfillFile> {
        self.file.lock()
    }

    fn save(&self, file: &BackfillFile) -> Result<(), CoordError> {
        self.file.save(file)
    }

    /// Changes the request `name` by `change` durably (nothing if it is gone); the new record.
    fn update(
        &self,
        name: &str,
        change: impl FnOnce(&BackfillRecord) -> BackfillRecord,
    ) -> Result<Option<BackfillRecord>, CoordError> {
        let mut file = self.lock();
        let Some(previous) = file.backfills.get(name).cloned() else {
            return Ok(None);
        };
        let new = change(&previous);
        if new == previous {
            return Ok(Some(new));
        }
        file.backfills.insert(name.to_string(), new.clone());
        if let Err(error) = self.save(&file) {
            file.backfills.insert(name.to_string(), previous);
            return Err(error);
        }
        Ok(Some(new))
    }

    /// A new request, durable before it returns; its name.
    pub(super) fn request(
        &self,
        record: BackfillRecord,
        now: DateTime<Utc>,
    ) -> Result<String, CoordError> {
        let mut file = self.lock();
        let name = backfill::request_name(&record.task, file.next);
        file.next += 1;
        file.backfills.insert(name.clone(), record);
        collect(&mut file, now);
        if let Err(error) = self.save(&file) {
            file.backfills.remove(&name);
            file.next -= 1;
            return Err(error);
        }
        Ok(name)
    }

    /// Every request kept, by name.
    pub(super) fn list(&self) -> BTreeMap<String, BackfillRecord> {
        self.lock().backfills.clone()
    }

    /// Cancels the request `name`; the record as it was before, `None` if there is none.
    pub(super) fn cancel(
        &self,
        name: &str,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<BackfillRecord>, CoordError> {
        let before = self.lock().backfills.get(name).cloned();
        self.update(name, |record| {
            operator::cancelled(record, by, now).unwrap_or_else(|| record.clone())
        })?;
        Ok(before)
    }

    /// The requests of `tasks` that want their next tick claimed, by task, oldest first.
    pub(super) fn pending(&self, tasks: &BTreeSet<Arc<str>>) -> BTreeMap<String, Vec<Backfill>> {
        let file = self.lock();
        let pending = file
            .backfills
            .iter()
            .filter(|(_, record)| record.wants_tick() && tasks.contains(record.task.as_str()));
        by_task(pending.map(|(name, record)| (record.task.clone(), Backfill::of(name, record))))
    }

    /// Claims the backfill tick `trigger` (a backfill fire id) for `node` (see
    /// [`backfill::admit`]), durably.
    pub(super) fn claim(
        &self,
        task: &str,
        trigger: &Trigger,
        leads: bool,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, CoordError> {
        let Some((name, tick)) = backfill::of_fire_id(&trigger.fire_id) else {
            return Ok(ClaimOutcome::AlreadyClaimed {
                record: trigger.requested_at,
            });
        };
        let mut file = self.lock();
        let stored = file.backfills.get(name).filter(|r| r.task == task).cloned();
        if let Verdict::Refuse(outcome) = backfill::admit(leads, stored.as_ref(), tick, false) {
            return Ok(outcome);
        }
        let previous = stored.expect("admitted");
        let by = backfill::Claimer {
            node,
            session: None,
        };
        let new = backfill::claimed(&previous, name, tick, by, now);
        file.backfills.insert(name.to_string(), new);
        if let Err(error) = self.save(&file) {
            file.backfills.insert(name.to_string(), previous);
            return Err(error);
        }
        Ok(ClaimOutcome::Claimed)
    }

    /// Ends the running tick of a backfill run with its result.
    pub(super) fn end(
        &self,
        entry: &HistoryEntry,
        result: &RunResult,
        now: DateTime<Utc>,
    ) -> Result<(), CoordError> {
        let Some((name, _)) = backfill::of_fire_id(&entry.fire_id) else {
            return Ok(());
        };
        self.update(name, |record| {
            backfill::ended(record, entry, result.end_reason(), now)
        })?;
        Ok(())
    }
}

/// Drops ended requests past [`backfill::KEEP_ENDED`]; whether any went.
fn collect(file: &mut BackfillFile, now: DateTime<Utc>) -> bool {
    let before = file.backfills.len();
    file.backfills
        .retain(|_, record| !backfill::expired(record, now));
    file.backfills.len() != before
}

#[cfg(test)]
#[path = "backfill_tests.rs"]
mod tests;
