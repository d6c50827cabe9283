//! The stamps cache: which files a reload reads again, full or named.
use std::fs::FileTimes;
use std::path::PathBuf;

use super::*;
use crate::task::TaskFileError;

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
            defaults: TaskDefaults::for_tests(),
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
        reload_jobs_dir(
            &self.jobs(),
            &self.defaults,
            &mut self.cache,
            self.now,
            Scan::Full,
        )
        .unwrap_or_else(|problems| panic!("{problems:?}"))
    }

    /// A named reload of the entries `names`, checked against a full scan of the same dir
    /// with a fresh cache: the same tasks, errors and ignored files.
    fn reload_named(&mut self, names: &[&str]) -> LoadedDir<Arc<TaskSpec>> {
        let names: BTreeSet<OsString> = names.iter().map(OsString::from).collect();
        let jobs = self.jobs();
        let named = reload_jobs_dir(
            &jobs,
            &self.defaults,
            &mut self.cache,
            self.now,
            Scan::Named(&names),
        )
        .unwrap_or_else(|problems| panic!("{problems:?}"));
        let mut fresh = LoadCache::default();
        let full = reload_jobs_dir(&jobs, &self.defaults, &mut fresh, self.now, Scan::Full)
            .unwrap_or_else(|problems| panic!("{problems:?}"));
        assert_eq!(schedules(&named), schedules(&full), "named: the same tasks");
        let messages = |loaded: &LoadedDir<Arc<TaskSpec>>| {
            let of = |e: &TaskFileError| (e.path.clone(), e.line, e.column, e.message.clone());
            loaded.errors.iter().map(of).collect::<Vec<_>>()
        };
        assert_eq!(messages(&named), messages(&full), "named: the same errors");
        assert_eq!(named.ignored, full.ignored, "named: the same ignored files");
        named
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.jobs().join(name)).unwrap();
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

/// A dir of three settled files, remembered by a full scan.
fn remembered_abc() -> Dir {
    let mut dir = Dir::new();
    for (name, minute) in [("a.toml", 1), ("b.toml", 2), ("c.toml", 3)] {
        dir.write(name, &hourly(minute));
    }
    dir.reload();
    dir
}

#[test]
fn a_named_reload_reads_a_written_file_and_keeps_the_others_unlooked_at() {
    let mut dir = remembered_abc();
    let before = dir.reload();
    dir.write("b.toml", &hourly(22));
    let changed = dir.reload_named(&["b.toml"]);
    assert_eq!(dir.cache.last_scan(), &Scanned::Named { names: 1 });
    assert_eq!(dir.cache.last_reads(), 1);
    assert_eq!(schedules(&changed)[1], ("b".into(), "22 * * * *".into()));
    assert!(
        Arc::ptr_eq(&before.tasks[0], &changed.tasks[0]),
        "a kept, same Arc"
    );
    assert!(
        Arc::ptr_eq(&before.tasks[2], &changed.tasks[2]),
        "c kept, same Arc"
    );
    // Named again though unchanged: read, and the same Arc (nothing to restart).
    let again = dir.reload_named(&["b.toml"]);
    assert!(Arc::ptr_eq(&changed.tasks[1], &again.tasks[1]));
}

#[test]
fn a_named_reload_looks_at_nothing_it_was_not_told_of() {
    let mut dir = remembered_abc();
    // A change nobody reported (the watch would have): a named reload of another name keeps
    // the remembered task; the next full scan finds it.
    std::fs::write(dir.jobs().join("c.toml"), hourly(33)).unwrap();
    let named = reload_jobs_dir(
        &dir.jobs(),
        &dir.defaults,
        &mut dir.cache,
        dir.now,
        Scan::Named(&BTreeSet::from([OsString::from("a.toml")])),
    )
    .unwrap();
    assert_eq!(dir.cache.last_reads(), 1);
    assert_eq!(schedules(&named)[2], ("c".into(), "3 * * * *".into()));
    let full = dir.reload();
    assert_eq!(schedules(&full)[2], ("c".into(), "33 * * * *".into()));
}

#[test]
fn a_named_reload_adds_a_created_file_and_drops_a_deleted_one() {
    let mut dir = remembered_abc();
    dir.write("d.toml", &hourly(4));
    dir.remove("a.toml");
    let loaded = dir.reload_named(&["a.toml", "d.toml"]);
    assert_eq!(dir.cache.last_reads(), 1, "d read, a only looked at");
    let names: Vec<_> = schedules(&loaded).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["b", "c", "d"]);
    // Remembered: nothing to read when nothing is named.
    dir.reload_named(&[]);
    assert_eq!(dir.cache.last_reads(), 0);
}

#[test]
fn a_named_reload_follows_renames_in_out_and_within() {
    let mut dir = remembered_abc();
    // Within: a.toml becomes e.toml (both names reported).
    std::fs::rename(dir.jobs().join("a.toml"), dir.jobs().join("e.toml")).unwrap();
    let within = dir.reload_named(&["a.toml", "e.toml"]);
    assert_eq!(schedules(&within)[2], ("e".into(), "1 * * * *".into()));
    // Out: b.toml moved beside the dir.
    std::fs::rename(dir.jobs().join("b.toml"), dir.root.path().join("b.toml")).unwrap();
    let out = dir.reload_named(&["b.toml"]);
    assert_eq!(out.tasks.len(), 2);
    // In: an editor's write to a temporary file, then a rename over c.toml (a new inode with
    // the same size and mtime).
    dir.write("c.toml", &hourly(7));
    let replaced = dir.reload_named(&["c.toml"]);
    assert_eq!(schedules(&replaced)[0], ("c".into(), "7 * * * *".into()));
}

#[test]
fn a_named_reload_reports_a_file_made_writable_by_others() {
    use std::os::unix::fs::PermissionsExt;
    let mut dir = remembered_abc();
    let path = dir.jobs().join("a.toml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let loaded = dir.reload_named(&["a.toml"]);
    assert_eq!(loaded.tasks.len(), 2);
    assert_eq!(loaded.errors.len(), 1, "{:?}", loaded.errors);
    assert_eq!(loaded.errors[0].path, path);
    // Invalid files are read again at every reload, named or not, until fixed.
    dir.reload_named(&[]);
    assert_eq!(dir.cache.last_reads(), 1);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fixed = dir.reload_named(&["a.toml"]);
    assert!(fixed.errors.is_empty(), "{:?}", fixed.errors);
    assert_eq!(fixed.tasks.len(), 3);
}

#[test]
fn a_named_reload_reads_links_and_other_entries_as_a_full_scan_does() {
    let mut dir = remembered_abc();
    // A link to a file of the dir: never remembered, so read again at every reload, and a
    // change of its target shows through it.
    std::os::unix::fs::symlink("a.toml", dir.jobs().join("l.toml")).unwrap();
    std::fs::create_dir(dir.jobs().join("sub.toml")).unwrap();
    dir.write("notes.txt", "ignored");
    let loaded = dir.reload_named(&["l.toml", "sub.toml", "notes.txt"]);
    assert_eq!(loaded.errors.len(), 1, "the directory: {:?}", loaded.errors);
    assert_eq!(loaded.ignored.len(), 1);
    dir.write("a.toml", &hourly(44));
    let through = dir.reload_named(&["a.toml"]);
    let l = schedules(&through).into_iter().find(|(n, _)| n == "l");
    assert_eq!(l, Some(("l".into(), "44 * * * *".into())));
    std::fs::remove_file(dir.jobs().join("notes.txt")).unwrap();
    let gone = dir.reload_named(&["notes.txt"]);
    assert!(gone.ignored.is_empty());
}

#[test]
fn a_named_reload_without_a_complete_reload_before_it_scans_every_file() {
    let mut dir = Dir::new();
    dir.write("a.toml", &hourly(1));
    dir.reload_named(&[]);
    assert!(matches!(dir.cache.last_scan(), Scanned::FullInstead(_)));
    assert_eq!(dir.cache.last_reads(), 1);
    // Refused (a dir writable by others): the names of that burst were not looked at.
    use std::os::unix::fs::PermissionsExt;
    let jobs = dir.jobs();
    let set_mode =
        |mode| std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(mode)).unwrap();
    set_mode(0o777);
    let names = BTreeSet::from([OsString::from("a.toml")]);
    let refused = reload_jobs_dir(
        &jobs,
        &dir.defaults,
        &mut dir.cache,
        dir.now,
        Scan::Named(&names),
    );
    assert!(refused.is_err());
    set_mode(0o755);
    dir.write("a.toml", &hourly(9));
    let after = dir.reload_named(&[]);
    assert!(matches!(dir.cache.last_scan(), Scanned::FullInstead(_)));
    assert_eq!(schedules(&after), [("a".into(), "9 * * * *".into())]);
}

#[test]
fn a_named_reload_scans_every_file_when_a_user_a_task_runs_as_is_gone() {
    let mut dir = remembered_abc();
    // As if a remembered task ran as a user deleted since.
    let gone = (AccountKind::User, "zkcron-no-such-user-cache".to_string());
    dir.cache.accounts.insert(gone);
    dir.reload_named(&[]);
    let why = "a user or group a remembered task runs as is gone";
    assert_eq!(dir.cache.last_scan(), &Scanned::FullInstead(why));
    dir.reload_named(&[]);
    assert_eq!(dir.cache.last_scan(), &Scanned::Named { names: 0 });
}
