//! One journal line of the embedded backend: a change of one task's record (a claim, a
//! result, a queued tick, ticks not run), and how it applies. Applying a journal twice gives the
//! same state as once.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{FORMAT_VERSION, TaskRecord};
use crate::coord::RunResult;
use crate::coord::record;
use crate::plan::ledger::{self, TickEntry};

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Change {
    pub(super) format: u32,
    pub(super) task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) claimed: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<RunResult>,
    /// The claim was made to run the tick.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) run: bool,
    /// The claimed tick is queued behind a live run (`overlap = "queue"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) queue: Option<DateTime<Utc>>,
    /// The queued tick was started (claimed to run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) unqueue: Option<DateTime<Utc>>,
    /// Ticks not run that the change records (`plan::ledger`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) ticks: Vec<TickEntry>,
    /// The claim counts against the task's `max_runs` (`record::claimed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) counted: bool,
}

impl Change {
    /// A change of `task` that changes nothing yet: its fields are set by who makes it.
    pub(super) fn of(task: &str) -> Change {
        Change {
            format: FORMAT_VERSION,
            task: task.to_string(),
            claimed: None,
            result: None,
            run: false,
            queue: None,
            unqueue: None,
            ticks: Vec::new(),
            counted: false,
        }
    }

    /// Applies the change; applying a journal twice gives the same state as once.
    pub(super) fn apply(&self, records: &mut HashMap<String, TaskRecord>) {
        self.apply_to(records.entry(self.task.clone()).or_default());
    }

    pub(super) fn apply_to(&self, record: &mut TaskRecord) {
        if !self.ticks.is_empty() {
            let fresh = ledger::after(&self.ticks, record.last_claimed);
            record.ticks = ledger::merged(&record.ticks, &fresh, record.last_claimed);
        }
        if let Some(tick) = self.claimed
            && record.last_claimed.is_none_or(|previous| previous <= tick)
        {
            // A claim that moves the record to run its tick (or queue it) counts against
            // `max_runs`, once: applied again, it no longer moves the record.
            if self.counted && record.last_claimed.is_none_or(|previous| previous < tick) {
                record.runs += 1;
            }
            record.last_claimed = Some(tick);
            record.claimed_to_run = self.run;
        }
        if let Some(tick) = self.queue
            && record.queue_started.is_none_or(|started| started < tick)
        {
            record.queued = Some(tick);
        }
        if let Some(tick) = self.unqueue {
            if record.queued == Some(tick) {
                record.queued = None;
            }
            record.queue_started = record.queue_started.max(Some(tick));
            if record.last_claimed == Some(tick) && self.run {
                record.claimed_to_run = true;
            }
        }
        // Replay applies the same rule as `run_ended`, so a journal from before it (which
        // stored every result) reads as if the rule had always held.
        if let Some(result) = &self.result
            && record::supersedes(record.last_result.as_ref().map(|r| r.tick), result.tick)
        {
            record.last_result = Some(Box::new(result.clone()));
        }
    }
}
