//! croner's parses of the expressions in use, made when a tick is needed and kept in a small
//! bounded cache.
//!
//! croner keeps a 5,001-byte year bitmap in every parsed expression, so keeping one parse per
//! task costs 50 MB for 10,000 tasks with distinct expressions. A [`Schedule`](super::Schedule)
//! keeps only its (validated) text; the parse comes from here. A fleet repeats a few
//! expressions, which stay in the cache; with more distinct expressions than [`CAPACITY`] the
//! least recently used parse is dropped and made again when its task next needs a tick (a
//! parse takes microseconds, a task needs one at each of its ticks).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use chrono_tz::Tz;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds};

/// How many parses are kept: about 650 KB of bitmaps at most.
pub(super) const CAPACITY: usize = 128;

struct Cache {
    entries: HashMap<Arc<str>, Entry>,
    /// Counts lookups: an entry's `used` is the count at its last use.
    clock: u64,
    capacity: usize,
}

struct Entry {
    cron: Arc<Cron>,
    used: u64,
}

impl Cache {
    fn new(capacity: usize) -> Cache {
        Cache {
            entries: HashMap::new(),
            clock: 0,
            capacity,
        }
    }

    fn get(&mut self, expanded: &str) -> Option<Arc<Cron>> {
        self.clock += 1;
        let entry = self.entries.get_mut(expanded)?;
        entry.used = self.clock;
        Some(entry.cron.clone())
    }

    /// Keeps `cron`, dropping the least recently used parse when the cache is full.
    fn insert(&mut self, expanded: &str, cron: Arc<Cron>) {
        if self.entries.len() >= self.capacity
            && !self.entries.contains_key(expanded)
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
        {
            self.entries.remove(&oldest);
        }
        self.clock += 1;
        let used = self.clock;
        self.entries.insert(expanded.into(), Entry { cron, used });
    }
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(|| Mutex::new(Cache::new(CAPACITY)));

/// The parse of `expanded`, the five or six fields as croner reads them (after
/// `cron::cronie_fields`), from the cache or made now.
pub(super) fn parsed(expanded: &str) -> Result<Arc<Cron>, CronError> {
    if let Some(cron) = CACHE.lock().expect("schedule cache poisoned").get(expanded) {
        return Ok(cron);
    }
    // Parsed outside the lock: other schedules' lookups do not wait for it.
    let cron = Arc::new(parse(expanded)?);
    CACHE
        .lock()
        .expect("schedule cache poisoned")
        .insert(expanded, cron.clone());
    Ok(cron)
}

fn parse(expanded: &str) -> Result<Cron, CronError> {
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    CronParser::builder()
        .seconds(Seconds::Optional)
        .dom_and_dow(days_combine_with_and(&fields))
        .build()
        .parse(expanded)
}

/// Whether the day-of-month and day-of-week fields of a five- or six-field expression combine with
/// AND. cronie's rule: a day field whose text starts with `*` (`*`, `*/2`, `*,3`) is unrestricted,
/// and then a day must match both fields; only when neither starts with `*` does a day match when
/// either field matches. `?` means `*`. croner alone ORs whenever neither field is exactly `*`.
fn days_combine_with_and(fields: &[&str]) -> bool {
    let offset = fields.len().saturating_sub(5);
    let unrestricted = |index: usize| {
        fields
            .get(offset + index)
            .is_some_and(|field| field.starts_with(['*', '?']))
    };
    unrestricted(2) || unrestricted(4)
}

/// The expressions (the fields as croner reads them, and the zone) that parsed and have a tick,
/// since the last [`forget_all`]: a jobs dir of 100,000 tasks repeats a few thousand
/// expressions, and each is parsed and checked once per load instead of once per task. Only
/// the text is kept (tens of bytes an expression), and only until the load is over.
static FIRES: LazyLock<Mutex<HashMap<Tz, HashSet<Box<str>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether `expanded` in `timezone` was found to parse and to fire since the last
/// [`forget_all`].
pub(super) fn known_to_fire(expanded: &str, timezone: Tz) -> bool {
    FIRES
        .lock()
        .expect("schedule memo poisoned")
        .get(&timezone)
        .is_some_and(|known| known.contains(expanded))
}

/// Remembers that `expanded` in `timezone` parses and fires (see [`known_to_fire`]).
pub(super) fn remember_fires(expanded: &str, timezone: Tz) {
    FIRES
        .lock()
        .expect("schedule memo poisoned")
        .entry(timezone)
        .or_default()
        .insert(expanded.into());
}

/// Drops every cached parse (after a burst of loads and timer starts: the parses kept then are
/// of whichever expressions came last, not of the ticks due next; up to 650 KB idle), and the
/// expressions known to fire. Parses are made again when a tick needs them.
pub(super) fn forget_all() {
    let mut cache = CACHE.lock().expect("schedule cache poisoned");
    cache.entries = HashMap::new();
    *FIRES.lock().expect("schedule memo poisoned") = HashMap::new();
}

/// How many parses the cache holds.
#[cfg(test)]
pub(super) fn cached() -> usize {
    CACHE.lock().expect("schedule cache poisoned").entries.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_at_most_its_capacity_and_drops_the_least_recently_used() {
        let mut cache = Cache::new(4);
        let keys: Vec<Arc<str>> = (0..6).map(|m| format!("{m} 3 * * *").into()).collect();
        for key in &keys[..4] {
            cache.insert(key, Arc::new(parse(key).unwrap()));
        }
        // The first is used again: the second is now the least recently used.
        assert!(cache.get(&keys[0]).is_some());
        cache.insert(&keys[4], Arc::new(parse(&keys[4]).unwrap()));
        assert_eq!(cache.entries.len(), 4);
        assert!(
            cache.get(&keys[1]).is_none(),
            "the least recently used went"
        );
        assert!(cache.get(&keys[0]).is_some());
        cache.insert(&keys[5], Arc::new(parse(&keys[5]).unwrap()));
        assert_eq!(cache.entries.len(), 4);
        assert!(cache.get(&keys[2]).is_none());
    }

    #[test]
    fn identical_expressions_share_one_parse_while_it_is_cached() {
        let mut cache = Cache::new(4);
        let key: Arc<str> = "17 3 * * *".into();
        cache.insert(&key, Arc::new(parse(&key).unwrap()));
        let a = cache.get("17 3 * * *").unwrap();
        let b = cache.get("17 3 * * *").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
