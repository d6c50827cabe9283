//! Whether a task is done, and why, for `status`, `explain`, the API and the dashboard: it ran
//! its `max_runs` scheduled ticks, or it is a one-shot (`@at`) whose tick its fire record
//! accounts for. Like a window that has ended, done is not a problem.

use chrono::SecondsFormat;

use crate::coord::record;
use crate::coord::records::{FireRecord, TaskSetEntry};

use super::entry_schedule;

/// What `status` says of a done task (`None` while it is not done): "done after 3 runs
/// (max_runs)", or of a one-shot "done: its one tick, <instant>, ran" or "... was not run".
pub fn done_note(entry: Option<&TaskSetEntry>, record: Option<&FireRecord>) -> Option<String> {
    let (entry, record) = (entry?, record?);
    if let Some(max) = entry.max_runs
        && record.runs >= u64::from(max)
    {
        return Some(format!("done after {} runs (max_runs)", record.runs));
    }
    // A one-shot (or a list of them) is done once no tick is left after what the record
    // accounts for; `instant` is its last.
    let schedule = entry_schedule(entry)?;
    schedule.one_shot()?;
    let accounted = record::accounted(record)?;
    if schedule.next_after(accounted).is_some() {
        return None;
    }
    let instant = schedule.latest_at_or_before(accounted)?;
    let shown = instant.to_rfc3339_opts(SecondsFormat::Secs, true);
    Some(if record.tick == Some(instant) && record.run {
        format!("done: its one tick, {shown}, ran (@at)")
    } else {
        format!("done: its one tick, {shown}, was not run (@at; `history --ticks` says why)")
    })
}

#[cfg(test)]
mod tests;
