//! A named reload ([`Scan::Named`]): the daemon's watch of the jobs dir says which entries
//! changed, so only those are looked at (`fstatat`) and read; every other remembered file is
//! kept without a look, and the dir is not listed. A named entry is whatever the listing would
//! have found under that name: a new, rewritten, replaced (new inode) or renamed-in file is read,
//! one gone (deleted, renamed out) is dropped, a link, a directory or a FIFO is read as a full
//! scan reads it (and so reported), an ignored name updates the ignored files. The files not
//! remembered (invalid, links, too recent) are read again, as on every reload.

use std::collections::BTreeMap;

use super::*;
use crate::task::ignore_reason;
use crate::task::load::open_jobs_dir;

/// Why a named reload cannot rely on `cache` and must be a full scan, if it must: the cache is
/// not the dir as last seen, or a user or group a remembered task runs as is gone (the full
/// scan reads that task's file again and reports it).
pub(super) fn why_not(cache: &LoadCache) -> Option<&'static str> {
    if !cache.complete {
        return Some("no complete reload to rely on (start-up, or the dir was refused)");
    }
    let mut accounts = Accounts::default();
    let gone = cache
        .accounts
        .iter()
        .any(|(kind, name)| !accounts.exists(*kind, name));
    gone.then_some("a user or group a remembered task runs as is gone")
}

/// The named reload of `dir`: `names` are the entries changed since the last reload.
pub(super) fn reload(
    dir: &Path,
    defaults: &TaskDefaults,
    cache: &mut LoadCache,
    now: SystemTime,
    names: &BTreeSet<OsString>,
) -> Result<LoadedDir<Arc<TaskSpec>>, Vec<PathProblem>> {
    let opened = open_jobs_dir(dir, defaults)?;
    // The files not remembered are read again; those named are looked at below.
    let mut to_read: Vec<Listed> = std::mem::take(&mut cache.unremembered)
        .into_iter()
        .filter(|file| !is_named(file, names))
        .collect();
    // The remembered tasks of the named files, by task name, and their places in the cache:
    // they are read again.
    let mut previous: BTreeMap<Arc<str>, Arc<TaskSpec>> = BTreeMap::new();
    let mut places = BTreeSet::new();
    for name in names {
        let path = dir.join(name);
        let entry = look_at(&opened, name);
        if let Some(reason) = ignore_reason(&path) {
            note_ignored(&mut cache.ignored, path, reason, entry);
            continue;
        }
        let task = task_name_of(&path);
        if let Ok(i) = cache
            .files
            .binary_search_by(|cached| (*cached.spec.name).cmp(&task))
        {
            let spec = &cache.files[i].spec;
            previous.insert(spec.name.clone(), spec.clone());
            places.insert(i);
        }
        if let Some(entry) = entry {
            let regular = entry == Entry::Regular;
            to_read.push(Listed { path, regular });
        }
    }
    cache.last_reads = to_read.len();
    cache.last_scan = Scanned::Named { names: names.len() };
    let mut loaded = LoadedDir {
        ignored: cache.ignored.clone(),
        ..LoadedDir::default()
    };
    let mut read: Vec<(Arc<str>, Option<Stamp>, Arc<TaskSpec>)> = Vec::new();
    for (tasks, errors) in load_files(&opened, &to_read, defaults) {
        for (spec, meta) in tasks {
            let before = previous.get(&spec.name).cloned();
            let (stamp, spec) = stamped(spec, meta, before, now);
            read.push((spec.name.clone(), stamp, spec));
        }
        loaded.errors.extend(errors);
    }
    read.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let remembered: BTreeSet<&Path> = read
        .iter()
        .filter(|(_, stamp, _)| stamp.is_some())
        .map(|(_, _, spec)| spec.path.as_path())
        .collect();
    cache.unremembered = to_read
        .into_iter()
        .filter(|file| !remembered.contains(file.path.as_path()))
        .collect();
    merge(cache, &places, read, &mut loaded.tasks);
    Ok(finish(loaded))
}

/// Whether `file` is one of the entries `names`.
fn is_named(file: &Listed, names: &BTreeSet<OsString>) -> bool {
    file.path
        .file_name()
        .is_some_and(|name| names.contains(name))
}

/// What a look at a named entry found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A regular file: opened relative to the dir, as a listing's regular file is.
    Regular,
    /// Anything else (a link, a directory, a FIFO), or an entry that cannot be looked at:
    /// loading looks at it first and reports what is wrong.
    Other,
}

/// The entry `name` of the open dir, `None` when there is none (deleted, renamed out).
fn look_at(dir: &File, name: &OsString) -> Option<Entry> {
    match nix::sys::stat::fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if stat.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG => Some(Entry::Regular),
        Ok(_) => Some(Entry::Other),
        Err(nix::errno::Errno::ENOENT) => None,
        Err(_) => Some(Entry::Other),
    }
}

/// Keeps `ignored` (sorted) as a listing would find it after the entry `path`, ignored for
/// `reason`, changed (`entry`: whether it is there now).
fn note_ignored(
    ignored: &mut Vec<(std::path::PathBuf, &'static str)>,
    path: std::path::PathBuf,
    reason: &'static str,
    entry: Option<Entry>,
) {
    let at = ignored.binary_search_by(|(known, _)| known.as_path().cmp(&path));
    match (at, entry) {
        (Ok(_), Some(_)) => {}
        (Ok(i), None) => {
            ignored.remove(i);
        }
        (Err(i), Some(_)) => ignored.insert(i, (path, reason)),
        (Err(_), None) => {}
    }
}

/// The cache's files without those at `places` (read again), with the newly remembered ones
/// of `read`; and into `tasks` every task, in name order: those kept and those `read`.
fn merge(
    cache: &mut LoadCache,
    places: &BTreeSet<usize>,
    read: Vec<(Arc<str>, Option<Stamp>, Arc<TaskSpec>)>,
    tasks: &mut Vec<Arc<TaskSpec>>,
) {
    let before = std::mem::take(&mut cache.files);
    let mut kept = before
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !places.contains(i))
        .map(|(_, cached)| cached)
        .peekable();
    tasks.reserve_exact(kept.size_hint().1.unwrap_or(0) + read.len());
    let mut files = Vec::with_capacity(kept.size_hint().1.unwrap_or(0) + read.len());
    for (name, stamp, spec) in read {
        while let Some(cached) = kept.next_if(|cached| cached.spec.name < name) {
            tasks.push(cached.spec.clone());
            files.push(cached);
        }
        if let Some(stamp) = stamp {
            note_accounts(&mut cache.accounts, &spec);
            let cached = Cached {
                stamp,
                spec: spec.clone(),
            };
            files.push(cached);
        }
        tasks.push(spec);
    }
    for cached in kept {
        tasks.push(cached.spec.clone());
        files.push(cached);
    }
    cache.files = files;
}

/// Adds the user and group `spec` runs as to `accounts`.
fn note_accounts(accounts: &mut BTreeSet<(AccountKind, String)>, spec: &TaskSpec) {
    let named = [
        (AccountKind::User, &spec.user),
        (AccountKind::Group, &spec.extras.group),
    ];
    for (kind, name) in named {
        if let Some(name) = name {
            accounts.insert((kind, name.clone()));
        }
    }
}
