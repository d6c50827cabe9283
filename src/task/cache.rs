//! Reloading a jobs dir without reading again the files that did not change: [`LoadCache`]
//! remembers, per task file, its stamp (what `stat` says: device, inode, size, mtime, ctime,
//! mode, owner) and the task it held, and [`reload_jobs_dir`] reads only the files whose stamp
//! changed. With 100,000 task files a reload after one change reads one file, not 100,000.
//!
//! What a valid task depends on besides its file is checked again on every reload without
//! reading it: whether its `user` and `group` exist (looked up once per name and reload). A
//! file is remembered only when it is valid, a regular file (a symbolic link's target can
//! change under an unchanged link) and not changed in the last [`RACY_WINDOW`] before the
//! reload began: a write in the same tick of the file system's clock as the read would leave
//! the stamp as read (git's "racy clean" entries), so such a file is read again next time.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::load::{Listed, in_parallel, list_jobs_dir, load_files};
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
    /// How many files the last reload read (opened and checked); the others were remembered.
    last_reads: usize,
}

impl LoadCache {
    /// How many task files the last [`reload_jobs_dir`] read; the others it took from the
    /// cache unread.
    pub fn last_reads(&self) -> usize {
        self.last_reads
    }
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
/// file whose stamp is as remembered is not read again. `now` is when the reload began (the
/// caller's clock), which decides which files are too recent to be remembered.
pub fn reload_jobs_dir(
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
    let mut loaded = LoadedDir {
        ignored: listing.ignored,
        ..LoadedDir::default()
    };
    let mut read: Vec<(TaskSpec, Option<std::fs::Metadata>)> = Vec::with_capacity(to_read.len());
    for (tasks, errors) in load_files(&listing.dir, &to_read, defaults) {
        read.extend(tasks);
        loaded.errors.extend(errors);
    }
    drop(to_read);
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
                let stamp = meta.map(|meta| Stamp::of(&meta));
                let spec = match previous {
                    Some(previous) if *previous == spec => previous,
                    _ => Arc::new(spec),
                };
                (stamp.filter(|stamp| stamp.settled(now)), spec)
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
    // Stable, so each file's errors keep their order (whole-file first, then by position).
    loaded.errors.sort_by(|a, b| a.path.cmp(&b.path));
    super::chain::check_chains(&mut loaded.tasks, &mut loaded.errors);
    Ok(loaded)
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
        let user = spec.user.as_ref().is_none_or(|name| {
            *self
                .users
                .entry(name.clone())
                .or_insert_with(|| user_exists(name).unwrap_or(false))
        });
        let group = spec.extras.group.as_ref().is_none_or(|name| {
            *self.groups.entry(name.clone()).or_insert_with(|| {
                nix::unistd::Group::from_name(name).is_ok_and(|group| group.is_some())
            })
        });
        user && group
    }
}

#[cfg(test)]
mod tests {
    use std::fs::FileTimes;
    use std::path::PathBuf;

    use super::*;
    use crate::task::Identity;

    /// An hour ago from `now`: files written then are settled.
    const AGE: Duration = Duration::from_secs(3600);

    struct Dir {
        /// Holds the jobs dir and, beside it, where replacements are written.
        root: tempfile::TempDir,
        cache: LoadCache,
        defaults: TaskDefaults,
        now: SystemTime,
    }

    impl Dir {
        fn new() -> Dir {
            let root = tempfile::tempdir().unwrap();
            std::fs::create_dir(root.path().join("jobs.d")).unwrap();
            Dir {
                root,
                cache: LoadCache::default(),
                defaults: TaskDefaults {
                    timezone: chrono_tz::UTC,
                    user: None,
                    identity: Identity::current(),
                    backend: crate::task::TaskBackend::Local,
                },
                // The tests' only clock: every file gets an explicit time before it.
                now: SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000),
            }
        }

        fn jobs(&self) -> PathBuf {
            self.root.path().join("jobs.d")
        }

        /// Writes `name` in the jobs dir (through a rename when `replace`) with `text`,
        /// modified at `mtime`.
        fn write_at(&self, name: &str, text: &str, mtime: SystemTime) {
            let scratch = self.root.path().join(name);
            std::fs::write(&scratch, text).unwrap();
            let file = File::options().write(true).open(&scratch).unwrap();
            file.set_times(FileTimes::new().set_modified(mtime).set_accessed(mtime))
                .unwrap();
            std::fs::rename(&scratch, self.jobs().join(name)).unwrap();
        }

        fn write(&self, name: &str, text: &str) {
            self.write_at(name, text, self.now - AGE);
        }

        fn reload(&mut self) -> LoadedDir<Arc<TaskSpec>> {
            reload_jobs_dir(&self.jobs(), &self.defaults, &mut self.cache, self.now)
                .unwrap_or_else(|problems| panic!("{problems:?}"))
        }
    }

    fn hourly(minute: u32) -> String {
        format!("schedule = \"{minute} * * * *\"\ncommand = [\"true\"]\n")
    }

    fn schedules(loaded: &LoadedDir<Arc<TaskSpec>>) -> Vec<(String, String)> {
        let of = |spec: &Arc<TaskSpec>| (spec.name.to_string(), spec.schedule.expression().into());
        loaded.tasks.iter().map(of).collect()
    }

    #[test]
    fn a_reload_reads_only_the_files_whose_stamp_changed() {
        let mut dir = Dir::new();
        for (name, minute) in [("a.toml", 1), ("b.toml", 2), ("c.toml", 3)] {
            dir.write(name, &hourly(minute));
        }
        let first = dir.reload();
        assert_eq!(dir.cache.last_reads(), 3);
        let again = dir.reload();
        assert_eq!(dir.cache.last_reads(), 0, "nothing changed, nothing read");
        assert!(
            first
                .tasks
                .iter()
                .zip(&again.tasks)
                .all(|(a, b)| Arc::ptr_eq(a, b)),
            "an unread file's task is the same Arc"
        );
        // A longer text, written an hour ago: its size says it changed.
        dir.write("b.toml", &hourly(22));
        let changed = dir.reload();
        assert_eq!(dir.cache.last_reads(), 1);
        assert_eq!(schedules(&changed)[1], ("b".into(), "22 * * * *".into()));
        assert!(Arc::ptr_eq(&first.tasks[0], &changed.tasks[0]));
        std::fs::remove_file(dir.jobs().join("c.toml")).unwrap();
        let removed = dir.reload();
        assert_eq!(dir.cache.last_reads(), 0);
        assert_eq!(removed.tasks.len(), 2);
    }

    #[test]
    fn the_stamp_of_a_look_at_a_file_is_the_stamp_of_its_read() {
        let dir = Dir::new();
        dir.write("a.toml", &hourly(1));
        let path = dir.jobs().join("a.toml");
        let read = Stamp::of(&std::fs::symlink_metadata(&path).unwrap());
        let stat = nix::sys::stat::lstat(&path).unwrap();
        assert_eq!(Stamp::of_regular(&stat), Some(read));
        std::os::unix::fs::symlink("a.toml", dir.jobs().join("b.toml")).unwrap();
        let link = nix::sys::stat::lstat(&dir.jobs().join("b.toml")).unwrap();
        assert_eq!(Stamp::of_regular(&link), None, "a link is no regular file");
    }

    #[test]
    fn a_file_replaced_by_a_rename_with_the_same_size_and_mtime_is_read_again() {
        let mut dir = Dir::new();
        dir.write("a.toml", &hourly(1));
        dir.reload();
        // Same length, same mtime: only the inode (and ctime) differ.
        dir.write("a.toml", &hourly(7));
        let loaded = dir.reload();
        assert_eq!(dir.cache.last_reads(), 1);
        assert_eq!(schedules(&loaded), [("a".into(), "7 * * * *".into())]);
    }

    #[test]
    fn a_file_changed_just_before_the_reload_is_read_again_at_the_next_one() {
        let mut dir = Dir::new();
        dir.write_at("a.toml", &hourly(1), dir.now - RACY_WINDOW / 2);
        dir.reload();
        dir.reload();
        assert_eq!(dir.cache.last_reads(), 1, "a racy stamp is not trusted");
        dir.now += RACY_WINDOW;
        dir.reload();
        dir.reload();
        assert_eq!(dir.cache.last_reads(), 0, "settled since, and remembered");
    }

    #[test]
    fn a_file_that_becomes_invalid_is_reported_and_read_again_until_fixed() {
        let mut dir = Dir::new();
        dir.write("a.toml", &hourly(1));
        dir.reload();
        dir.write(
            "a.toml",
            "schedule = \"61 * * * *\"\ncommand = [\"true\"]\n",
        );
        for _ in 0..2 {
            let broken = dir.reload();
            assert_eq!(
                dir.cache.last_reads(),
                1,
                "an invalid file is never remembered"
            );
            assert!(broken.tasks.is_empty());
            assert_eq!(broken.errors.len(), 1);
            assert_eq!((broken.errors[0].line, broken.errors[0].column), (1, 13));
        }
        dir.write("a.toml", &hourly(5));
        let fixed = dir.reload();
        assert!(fixed.errors.is_empty());
        assert_eq!(schedules(&fixed), [("a".into(), "5 * * * *".into())]);
    }

    #[test]
    fn a_task_whose_user_is_gone_is_read_again_and_its_error_reported() {
        let mut dir = Dir::new();
        // Only root may name another user (as anyone else the file is an error before its user
        // is looked up): the test fails rather than pass without running.
        assert!(
            dir.defaults.identity.is_root(),
            "this test needs root (a task naming another user): run `sudo -E cargo test --lib \
             task::cache` or scripts/test as root, as CI does"
        );
        let user = "zkcron-no-such-user-cache";
        dir.write("a.toml", &format!("{}user = {user:?}\n", hourly(1)));
        let loaded = dir.reload();
        assert_eq!(loaded.errors.len(), 1, "{:?}", loaded.errors);
        let again = dir.reload();
        assert_eq!(dir.cache.last_reads(), 1);
        assert!(
            again.errors[0]
                .message
                .contains("does not exist on this host")
        );
    }

    #[test]
    fn a_remembered_task_is_checked_for_its_user_without_reading_its_file() {
        let mut accounts = Accounts::default();
        let mut dir = Dir::new();
        dir.write("a.toml", &hourly(1));
        let loaded = dir.reload();
        let mut spec = (*loaded.tasks[0]).clone();
        assert!(accounts.all_exist(&spec));
        spec.user = Some("zkcron-no-such-user-cache".into());
        assert!(!accounts.all_exist(&spec));
        spec.user = Some("root".into());
        assert!(accounts.all_exist(&spec));
        spec.extras.group = Some("zkcron-no-such-group-cache".into());
        assert!(!accounts.all_exist(&spec));
    }
}
