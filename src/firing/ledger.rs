//! The ticks the leader does not run, on their way to the fire record (`plan::ledger`).
//!
//! Each entry this node fires keeps the ticks it decided not to run and has not written yet.
//! The next claim of the task carries them (it writes the record anyway: no write of their
//! own on the fire path); when no claim comes within [`NOTE_AFTER`], or none will (the
//! schedule has no tick left), a claim of intent [`ClaimIntent::Note`] writes them alone. A claim that fails gives them back; a task that
//! stops forgets them, and the next leader, starting from the record, accounts for those ticks.

use chrono::{DateTime, Utc};

use super::{Action, Call, Firing, Key, Wake};
use crate::coord::{ClaimIntent, ClaimOutcome, CoordError};
use crate::plan::ledger::{self, NOTE_AFTER, TickEntry};
use std::cmp::Reverse;

/// The entries of one task not written yet, and since when the oldest waits.
#[derive(Debug)]
pub(super) struct Noted {
    entries: Vec<TickEntry>,
    since: DateTime<Utc>,
}

impl<P> Firing<P> {
    /// Adds `entries` (oldest first) to what the task of `key` has to write.
    pub(super) fn note(&mut self, key: Key, entries: impl IntoIterator<Item = TickEntry>) {
        if self.config.bugs.forget_ledger {
            return;
        }
        let now = self.now;
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let mut armed = false;
        for tick in entries {
            let noted = entry.noted.get_or_insert_with(|| {
                armed = true;
                Box::new(Noted {
                    entries: Vec::new(),
                    since: now,
                })
            });
            ledger::push(&mut noted.entries, tick);
        }
        if armed {
            self.heap
                .push(Reverse((now + NOTE_AFTER, Wake::Ledger(key))));
        }
    }

    /// Takes what the task of `key` has to write, for a claim to carry.
    pub(super) fn take_noted(&mut self, key: Key) -> Vec<TickEntry> {
        self.entry_mut(key)
            .and_then(|entry| entry.noted.take())
            .map(|noted| noted.entries)
            .unwrap_or_default()
    }

    /// Gives back `carried`, the entries of a claim that failed: they go with the next write.
    pub(super) fn renote(&mut self, key: Key, carried: Vec<TickEntry>) {
        if carried.is_empty() {
            return;
        }
        let later = self.take_noted(key);
        self.note(key, carried.into_iter().chain(later));
    }

    /// The wake-up of `key`'s entries set for `at`: still unwritten, they go alone.
    pub(super) fn ledger_woke(&mut self, key: Key, at: DateTime<Utc>) {
        let due = self
            .entry(key)
            .and_then(|entry| entry.noted.as_ref())
            .is_some_and(|noted| noted.since + NOTE_AFTER <= at);
        if due {
            self.write_noted(key);
        }
    }

    /// Writes what the task of `key` has to write, alone, now: no claim comes to carry it
    /// (its schedule has no tick left, or none within [`NOTE_AFTER`]).
    pub(super) fn write_noted(&mut self, key: Key) {
        let ticks = self.take_noted(key);
        let Some(last) = ticks.last().map(|e| e.to) else {
            return;
        };
        let task = self.entry(key).expect("noted").spec.name.clone();
        let call = self.call(Call::Note(key, ticks.clone()));
        self.out.push_back(Action::Claim {
            call,
            task,
            tick: last,
            intent: ClaimIntent::Note,
            ticks,
        });
    }

    /// The answer to a write of `carried` alone: a failure gives them back, unless the node no
    /// longer leads the task (the next leader accounts for them from the record).
    pub(super) fn note_written(
        &mut self,
        key: Key,
        carried: Vec<TickEntry>,
        result: Result<ClaimOutcome, CoordError>,
    ) {
        if result.is_err() {
            self.renote(key, carried);
        }
    }
}
