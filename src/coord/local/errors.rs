//! I/O errors in the state dir in the operator's words: a full disk or quota names the
//! filesystem to free, a directory zkcron's user cannot write names the command that fixes it.
//! The journal writer, the state reader and `preflight` say them the same way.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// An I/O error in the state dir in the operator's words: a full disk or quota names the fix.
pub(super) fn explain_io(state_dir: &Path, error: &io::Error) -> String {
    let full = |what: &str| {
        format!(
            "state_dir {} is {what}: free space on {} ({error}); until then no tick can be \
             claimed, so none runs",
            state_dir.display(),
            filesystem_of(state_dir).display()
        )
    };
    match error.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOSPC) => full("full"),
        Some(Errno::EDQUOT) => full("over its disk quota"),
        Some(errno @ (Errno::EACCES | Errno::EPERM | Errno::EROFS)) => {
            let user = crate::task::Identity::current().user_name;
            format!(
                "{error}; zkcron runs as {user:?}: {}",
                not_writable_fix(state_dir, &user, errno)
            )
        }
        _ => error.to_string(),
    }
}

/// The fix for a state dir that zkcron's user (`user`) cannot write or create (`errno` says
/// why): give the user the directory, or choose another.
pub(crate) fn not_writable_fix(state_dir: &Path, user: &str, errno: Errno) -> String {
    let elsewhere = "point --state-dir or [scheduler].state_dir elsewhere";
    if errno == Errno::EROFS {
        return format!("the filesystem is read-only: {elsewhere}");
    }
    let dir = crate::task::shell_quote(state_dir);
    if state_dir.is_dir() {
        format!("run `chown {user} {dir}`, or {elsewhere}")
    } else {
        format!("run `mkdir -p {dir} && chown {user} {dir}`, or {elsewhere}")
    }
}

/// The mount point of the filesystem that holds `path` (where the operator frees space), or
/// `path` itself when that cannot be told.
fn filesystem_of(path: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let device = |path: &Path| fs::metadata(path).map(|m| m.dev()).ok();
    let Ok(mut mount) = fs::canonicalize(path) else {
        return path.to_path_buf();
    };
    let Some(dev) = device(&mount) else {
        return mount;
    };
    while let Some(parent) = mount.parent() {
        if device(parent) != Some(dev) {
            break;
        }
        mount = parent.to_path_buf();
    }
    mount
}
