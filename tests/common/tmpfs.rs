//! A small tmpfs to fill up, for tests of what zkcron does when its state dir's filesystem is
//! full. Mounting needs root: CI runs the tests as root; elsewhere [`rerun_as_root`] re-runs the
//! test in an unprivileged user and mount namespace.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a fresh temp dir; unmounted when dropped, even when the test fails.
pub struct Tmpfs {
    mount_point: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it, e.g. "64k").
    pub fn mount(size: &str) -> Tmpfs {
        let mount_point = tempfile::tempdir().expect("temp dir");
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("zkcron-test")
            .arg(mount_point.path())
            .output()
            .expect("`mount` runs (util-linux)");
        assert!(
            output.status.success(),
            "cannot mount a tmpfs on {} ({}: {}); this test fills a small filesystem and needs \
             root, or a system where `unshare --user --map-root-user --mount` works",
            mount_point.path().display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Tmpfs { mount_point }
    }

    pub fn path(&self) -> &Path {
        self.mount_point.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Fills the filesystem to its last byte with a file of its own.
    pub fn fill(&self) {
        let mut filler = fs::File::create(self.filler()).expect("create the filler");
        let chunk = [0u8; 4096];
        let error = loop {
            if let Err(error) = filler.write_all(&chunk) {
                break error;
            }
        };
        assert_eq!(
            error.raw_os_error(),
            Some(nix::errno::Errno::ENOSPC as i32),
            "filling the tmpfs: {error}"
        );
    }

    /// Frees the space [`Tmpfs::fill`] took.
    pub fn free(&self) {
        fs::remove_file(self.filler()).expect("remove the filler");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a mount still in use (a process the test left) is detached all the same.
        let unmounted = Command::new("umount")
            .arg("--lazy")
            .arg(self.path())
            .status();
        if !unmounted.as_ref().is_ok_and(|status| status.success()) {
            eprintln!(
                "cannot unmount the test tmpfs at {}: {unmounted:?}",
                self.path().display()
            );
        }
    }
}

/// Makes the calling test run as root. When this process is root it returns false and the test
/// goes on. Otherwise it re-runs `test` of this test binary under `unshare --user
/// --map-root-user --mount`, where mounting a tmpfs is allowed and every mount vanishes with the
/// namespace, and returns true: the caller returns, the re-run did the work. It panics with what
/// is needed when that is impossible or the re-run failed.
pub fn rerun_as_root(test: &str) -> bool {
    super::rerun_in_namespace(
        test,
        &["--user", "--map-root-user", "--mount"],
        "mounts a small tmpfs",
    )
}
