//! Reloading a jobs dir without reading again the files that did not change: [`LoadCache`]
//! remembers, per task file, its stamp (what `stat` says: device, inode, size, mtime, ctime,
//! mode, owner) and the task it held, and [`reload_jobs_dir`] reads only the files whose stamp
//! changed. With 100,000 task files a reload after one change reads one file, not 100,000.
//! A reload the watch named the entries of reads only those (`named`).
//!
//! What a valid task depends on besides its file is checked again on every reload without
//! reading it: whether its `user` and `group` exist (looked up once per name and reload). A
//! file is remembered only when it is valid, a regular file (a symbolic link's target can
//! change under an unchanged link) and not changed in the last [`RACY_WINDOW`] before the
//! reload began: a write in the same tick of the file system's clock as the read would leave
//! the stamp as read (git's "racy clean" entries), so such a file is read again next time.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::load::{Listed, in_parallel, list_jobs_dir, load_files};

mod named;
use super::{LoadedDir, TaskDefaults, TaskSpec, task_name_of, user_exists};
use crate::files::PathProblem;
use nix::fcntl::AtFlags;

/// A file changed less than this before a reload began is read again at the next one: file
/// timestamps come from a coarse clock (a few milliseconds here, seconds on some network file
/// systems), so a write just after the read could leave the stamp unchanged.
pub const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What `stat` says of a task file; any difference means it is read again. A file replaced by
/// a rename has a new inode, even with the same size and mtime; `chmod` and `chown` change the
/// ctime (and the mode or owner, which the trust rules check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    /// Nanoseconds since the epoch.
    mtime: i64,
    ctime: i64,
    mode: u32,
    uid: u32,
}

/// Nanoseconds since the epoch of a timestamp that `stat` gives as seconds and nanoseconds.
fn nanos(seconds: i64, nanoseconds: i64) -> i64 {
    seconds
        .saturating_mul(1_000_000_000)
        .saturating_add(nanoseconds)
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime: nanos(meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
            uid: meta.uid(),
        }
    }

    /// The stamp of what `fstatat` said, when it is a regular file (as [`Stamp::of`] of the
    /// same file's metadata).
    fn of_regular(stat: &nix::sys::stat::FileStat) -> Option<Stamp> {
        let kind = stat.st_mode & nix::libc::S_IFMT;
        (kind == nix::libc::S_IFREG).then(|| Stamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            mtime: nanos(stat.st_mtime, stat.st_mtime_nsec),
            ctime: nanos(stat.st_ctime, stat.st_ctime_nsec),
            mode: stat.st_mode,
            uid: stat.st_uid,
        })
    }

    /// Whether the file was last changed (content, inode or metadata) at least
    /// [`RACY_WINDOW`] before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let before = now
            .checked_sub(RACY_WINDOW)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let Ok(since_epoch) = before.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let before = nanos(
            since_epoch.as_secs() as i64,
            since_epoch.subsec_nanos() as i64,
        );
        self.mtime < before && self.ctime < before
    }
}

/// One remembered task file.
#[derive(Debug)]
struct Cached {
    stamp: Stamp,
    spec: Arc<TaskSpec>,
}

/// The task files of one jobs dir as last read by [`reload_jobs_dir`], with their stamps.
/// It shares each task's `Arc` with whoever keeps the loaded tasks, so it costs a stamp and a
/// pointer per file (56 bytes).
#[derive(Debug, Default)]
pub struct LoadCache {
    /// In task-name order, as the jobs dir is walked.
    files: Vec<Cached>,
    /// The task files the last reload found but did not remember (invalid, links, not regular
    /// files, changed too recently), in no particular order: every reload reads them again.
    unremembered: Vec<Listed>,
    /// The files ignored on purpose, with the reason, sorted.
    ignored: Vec<(std::path::PathBuf, &'static str)>,
    /// Every user and group the remembered tasks run as (a name no task uses any more stays
    /// until the next full scan): a named reload looks each up once.
    accounts: BTreeSet<(AccountKind, String)>,
    /// Whether the cache is the dir as the last reload saw it, so that a named reload may
    /// rely on it: not before the first full scan, nor after a reload the dir was refused in
    /// (the names of that burst were not looked at).
    complete: bool,
    /// How many files the last reload read (opened and checked); the others were remembered.
    last_reads: usize,
    /// How the last reload looked at the dir.
    last_scan: Scanned,
}

impl LoadCache {
    /// How many task files the last [`reload_jobs_dir`] read; the others it took from the
    /// cache unread.
    pub fn last_reads(&self) -> usize {
        self.last_reads
    }

    /// How the last [`reload_jobs_dir`] looked at the dir.
    pub fn last_scan(&self) -> &Scanned {
        &self.last_scan
    }
}

/// What a reload must look at.
#[derive(Debug, Clone, Copy)]
pub enum Scan<'a> {
    /// Every entry of the dir: at start-up, on SIGHUP, and whenever the watch cannot name
    /// what changed.
    Full,
    /// Only these entries (file names) changed since the last reload.
    Named(&'a BTreeSet<OsString>),
}

/// How a reload looked at the dir, for the debug log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scanned {
    /// No reload yet.
    #[default]
    Nothing,
    /// Listed, and each remembered file looked at (`stat`).
    Full,
    /// A named reload that had to be a full one, and why.
    FullInstead(&'static str),
    /// Only the named entries were looked at (and the files not remembered read).
    Named { names: usize },
}

/// A kind of account a task runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum AccountKind {
    User,
    Group,
}

/// What a reload does with one task file, in name order.
enum Slot {
    /// Remembered, and unchanged.
    Kept(Cached),
    /// Read again (its stamp comes from the read: the file opened, before it was read; none
    /// through a link), and the task it held before, if any.
    Read { previous: Option<Arc<TaskSpec>> },
}

/// [`super::load_jobs_dir`] through `cache`: the same tasks, errors and ignored files, but a
/// file whose stamp is as remembered is not read again, and with [`Scan::Named`] only the
/// named entries are looked at. `now` is when the reload began (the caller's clock), which
/// decides which files are too recent to be remembered. A named reload is a full one when the
/// cache cannot be relied on or a user or group of a remembered task is gone.
pub fn reload_jobs_dir(
    dir: &Path,
    defaults: &TaskDefaults,
    cache: &mut LoadCache,
    now: SystemTime,
    scan: Scan<'_>,
) -> Result<LoadedDir<Arc<TaskSpec>>, Vec<PathProblem>> {
    let result = match scan {
        Scan::Full => full_scan(dir, defaults, cache, now).inspect(|_| {
            cache.last_scan = Scanned::Full;
        }),
        Scan::Named(names) => match named::why_not(cache) {
            None => named::reload(dir, defaults, cache, now, names),
            Some(why) => full_scan(dir, defaults, cache, now).inspect(|_| {
                cache.last_scan = Scanned::FullInstead(why);
            }),
        },
    };
    cache.complete = result.is_ok();
    result
}

/// A reload that lists the dir and looks at every remembered file.
fn full_scan(
    dir: &Path,
    defaults: &TaskDefaults,
    cache: &mut LoadCache,
    now: SystemTime,
) -> Result<LoadedDir<Arc<TaskSpec>>, Vec<PathProblem>> {
    let listing = list_jobs_dir(dir, defaults)?;
    let mut files: Vec<(String, Listed)> = listing
        .files
        .into_iter()
        .map(|file| (task_name_of(&file.path), file))
        .collect();
    files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let (slots, to_read) = sort_out(&listing.dir, files, cache);
    cache.last_reads = to_read.len();
    cache.ignored.clone_from(&listing.ignored);
    let mut loaded = LoadedDir {
        ignored: listing.ignored,
        ..LoadedDir::default()
    };
    let mut read: Vec<(TaskSpec, Option<std::fs::Metadata>)> = Vec::with_capacity(to_read.len());
    for (tasks, errors) in load_files(&listing.dir, &to_read, defaults) {
        read.extend(tasks);
        loaded.errors.extend(errors);
    }
    cache.unremembered = unremembered(to_read, &read, now);
    // The tasks read come in the order of their files; a file that failed has none.
    let mut read = read.into_iter().peekable();
    loaded.tasks.reserve_exact(slots.len());
    cache.files.reserve_exact(slots.len());
    for (name, slot) in slots {
        let (stamp, spec) = match slot {
            Slot::Kept(cached) => (Some(cached.stamp), cached.spec),
            Slot::Read { previous } => {
                let Some((spec, meta)) = read.next_if(|(spec, _)| *spec.name == *name) else {
                    continue;
                };
                stamped(spec, meta, previous, now)
            }
        };
        if let Some(stamp) = stamp {
            let cached = Cached {
                stamp,
                spec: spec.clone(),
            };
            cache.files.push(cached);
        }
        loaded.tasks.push(spec);
    }
    cache.accounts = accounts_of(&cache.files);
    Ok(finish(loaded))
}

/// Which of the files `to_read` (in order) a reload will not remember, given what was `read`
/// of them (in the same order; a file that failed has nothing): those that failed, came
/// through a link or changed too recently before `now`. Takes the list, so that the paths of
/// the others are freed before the tasks read are moved to the heap.
fn unremembered(
    to_read: Vec<Listed>,
    read: &[(TaskSpec, Option<std::fs::Metadata>)],
    now: SystemTime,
) -> Vec<Listed> {
    let mut read = read.iter().peekable();
    let mut unremembered = Vec::new();
    for file in to_read {
        let remembered = read
            .next_if(|(spec, _)| spec.path.as_os_str() == file.path.as_os_str())
            .and_then(|(_, meta)| meta.as_ref())
            .is_some_and(|meta| Stamp::of(meta).settled(now));
        if !remembered {
            unremembered.push(file);
        }
    }
    unremembered
}

/// A task read, with the stamp to remember it by (none when it came through a link or changed
/// too recently before `now`), as the `previous` `Arc` when it is equal to it.
fn stamped(
    spec: TaskSpec,
    meta: Option<std::fs::Metadata>,
    previous: Option<Arc<TaskSpec>>,
    now: SystemTime,
) -> (Option<Stamp>, Arc<TaskSpec>) {
    let stamp = meta.map(|meta| Stamp::of(&meta));
    let spec = match previous {
        Some(previous) if *previous == spec => previous,
        _ => Arc::new(spec),
    };
    (stamp.filter(|stamp| stamp.settled(now)), spec)
}

/// The checks across files, once `loaded` holds every task in name order and every file's
/// errors.
fn finish(mut loaded: LoadedDir<Arc<TaskSpec>>) -> LoadedDir<Arc<TaskSpec>> {
    // Stable, so each file's errors keep their order (whole-file first, then by position).
    loaded.errors.sort_by(|a, b| a.path.cmp(&b.path));
    super::chain::check_chains(&mut loaded.tasks, &mut loaded.errors);
    loaded
}

/// The users and groups the tasks of `files` run as.
fn accounts_of(files: &[Cached]) -> BTreeSet<(AccountKind, String)> {
    let mut names: BTreeSet<(AccountKind, &str)> = BTreeSet::new();
    for cached in files {
        if let Some(user) = &cached.spec.user {
            names.insert((AccountKind::User, user));
        }
        if let Some(group) = &cached.spec.extras.group {
            names.insert((AccountKind::Group, group));
        }
    }
    names
        .into_iter()
        .map(|(kind, name)| (kind, name.to_string()))
        .collect()
}

/// Which of `files` (name and listing, in name order) of the open jobs dir `dir` keep their
/// cached task and which are read again: each file's slot, and the files to read. Takes the
/// cache's entries; the remembered files are looked at (`stat`) in parallel.
fn sort_out(
    dir: &File,
    files: Vec<(String, Listed)>,
    cache: &mut LoadCache,
) -> (Vec<(String, Slot)>, Vec<Listed>) {
    // Walked beside the files, both in name order: an entry passed over is a file gone.
    let mut before = std::mem::take(&mut cache.files).into_iter().peekable();
    let paired: Vec<(String, Listed, Option<Cached>)> = files
        .into_iter()
        .map(|(name, file)| {
            while before.next_if(|cached| *cached.spec.name < *name).is_some() {}
            let previous = before.next_if(|cached| *cached.spec.name == *name);
            (name, file, previous)
        })
        .collect();
    // Only a remembered file is looked at here; one read gets its stamp from the read.
    let unchanged: Vec<bool> = in_parallel(&paired, |part| {
        let stamp = |file: &Listed| {
            let name = file.path.file_name().unwrap_or_default();
            nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()
                .and_then(|stat| Stamp::of_regular(&stat))
        };
        part.iter()
            .map(|(_, file, previous)| {
                previous.as_ref().is_some_and(|cached| {
                    // As bytes: `Path`'s `==` walks components.
                    cached.spec.path.as_os_str() == file.path.as_os_str()
                        && stamp(file) == Some(cached.stamp)
                })
            })
            .collect::<Vec<bool>>()
    })
    .concat();
    let mut accounts = Accounts::default();
    let mut slots = Vec::with_capacity(paired.len());
    let mut to_read = Vec::new();
    for ((name, file, previous), unchanged) in paired.into_iter().zip(unchanged) {
        let slot = match previous {
            Some(cached) if unchanged && accounts.all_exist(&cached.spec) => Slot::Kept(cached),
            previous => {
                to_read.push(file);
                let previous = previous.map(|cached| cached.spec);
                Slot::Read { previous }
            }
        };
        slots.push((name, slot));
    }
    (slots, to_read)
}

/// The users and groups looked up during one reload, so that 100,000 tasks running as one user
/// cost one lookup.
#[derive(Default)]
struct Accounts {
    users: HashMap<String, bool>,
    groups: HashMap<String, bool>,
}

impl Accounts {
    /// Whether the user and group `spec` runs as (if any) exist; a failed lookup counts as
    /// missing, so the file is read again and its error reported.
    fn all_exist(&mut self, spec: &TaskSpec) -> bool {
        let user = spec
            .user
            .as_ref()
            .is_none_or(|name| self.exists(AccountKind::User, name));
        let group = spec
            .extras
            .group
            .as_ref()
            .is_none_or(|name| self.exists(AccountKind::Group, name));
        user && group
    }

    /// Whether the user or group `name` exists (looked up once per reload).
    fn exists(&mut self, kind: AccountKind, name: &str) -> bool {
        let (known, lookup): (_, fn(&str) -> bool) = match kind {
            AccountKind::User => (&mut self.users, |name| user_exists(name).unwrap_or(false)),
            AccountKind::Group => (&mut self.groups, |name| {
                nix::unistd::Group::from_name(name).is_ok_and(|group| group.is_some())
            }),
        };
        if let Some(&exists) = known.get(name) {
            return exists;
        }
        let exists = lookup(name);
        known.insert(name.to_string(), exists);
        exists
    }
}

#[cfg(test)]
mod tests;
