//! Giving memory freed after a burst back to the system.
//!
//! Loading 10,000 task files and reading 10,000 fire records allocate far more scratch memory
//! (file text, TOML trees, start-up futures) than what stays. glibc keeps what is freed in its
//! heaps, split into holes between the allocations that stay, and returns it to the kernel
//! only from the top of a heap; `malloc_trim` returns every free page of every heap. It is
//! called after a burst (a reload, the start of many tasks), never per tick.
//!
//! The same bursts run code that an idle daemon never runs again (TOML and cron parsing,
//! configuration, the start of 10,000 timers): about 8 MB of the program's own code pages
//! stay mapped after start-up and count in its RSS, though it needs well under 1 MB to idle.
//! [`release_code_pages`] unmaps them (and other clean read-only file pages: constants, unwind
//! tables); the kernel maps a page back from its page cache the next time it is used (a minor
//! fault).

/// Returns the free pages of the allocator's heaps to the kernel (glibc only; a no-op
/// elsewhere), the pages of code run since the last call ([`release_code_pages`]) and the
/// cached parses of cron expressions (up to 650 KB, made again when a tick needs one).
pub(super) fn release_free_memory() {
    crate::schedule::forget_cached_parses();
    release_code_pages();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim takes no pointer and only gives free pages of glibc's own heaps
        // back to the kernel; it locks each heap as malloc does, so it is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Makes glibc keep one heap for all threads (`M_ARENA_MAX` = 1); called before the runtime
/// starts its threads. By default glibc gives each thread that meets contention a heap of its
/// own, and each heap keeps its own free pages and holes: with 10,000 tasks loaded the extra
/// heaps held about 1.3 MB more than one shared heap (`benches/local.py --phase footprint`). The
/// daemon allocates little once started (a tick is a few allocations), so threads sharing one
/// heap's lock costs nothing measurable. No-op outside glibc.
pub(crate) fn use_one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const M_ARENA_MAX: std::ffi::c_int = -8;
        unsafe extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        // SAFETY: mallopt takes no pointer; M_ARENA_MAX only bounds the heaps glibc creates
        // from now on, and is safe to set while other threads allocate.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
        }
    }
}

/// Unmaps the read-only pages of files (the program's code and constants, the C library's)
/// that this process has in memory: clean copies of files the kernel keeps in its page cache,
/// so nothing is lost, and the next access maps its page again. Only mappings that are not
/// writable and hold no page of their own (`Anonymous: 0 kB`, so not the relocated
/// `.data.rel.ro`) are released: `MADV_DONTNEED` cannot discard a change. Linux only; a no-op
/// elsewhere and when `/proc/self/smaps` cannot be read.
fn release_code_pages() {
    #[cfg(target_os = "linux")]
    {
        const MADV_DONTNEED: std::ffi::c_int = 4;
        unsafe extern "C" {
            fn madvise(
                addr: *mut std::ffi::c_void,
                len: usize,
                advice: std::ffi::c_int,
            ) -> std::ffi::c_int;
        }
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return;
        };
        for (start, end) in clean_file_mappings(&smaps) {
            // SAFETY: [start, end) is a whole mapping of this process, not writable, backed by
            // a file and with no private (anonymous) page: MADV_DONTNEED drops the page-table
            // entries, and the next access faults the same bytes back in from the file's page
            // cache. No Rust object lives in such a mapping.
            unsafe {
                madvise(start as *mut std::ffi::c_void, end - start, MADV_DONTNEED);
            }
        }
    }
}

/// The address ranges of the mappings in `smaps` (the text of `/proc/self/smaps`) that are
/// backed by a file (a path, not `[vdso]` and the like), private, not writable (`r--p` or
/// `r-xp`) and hold no anonymous page.
fn clean_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut candidate = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else {
            continue;
        };
        if first == "Anonymous:" {
            if let Some(range) = candidate.take()
                && fields.next() == Some("0")
            {
                found.push(range);
            }
            continue;
        }
        let Some((start, end)) = first.split_once('-') else {
            continue;
        };
        // A mapping's header: range, permissions, offset, device, inode, path.
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let perms = fields.next();
        let path = fields.nth(3);
        candidate = (matches!(perms, Some("r--p" | "r-xp"))
            && path.is_some_and(|p| p.starts_with('/'))
            && start < end)
            .then_some((start, end));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_read_only_file_mappings_are_released() {
        let smaps = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 42 /usr/bin/zkcron
Rss:                 100 kB
Anonymous:             0 kB
55d0a0100000-55d0a0700000 r-xp 00100000 08:01 42 /usr/bin/zkcron
Anonymous:             0 kB
55d0a0700000-55d0a0800000 r--p 00700000 08:01 42 /usr/bin/zkcron
Anonymous:           804 kB
55d0a0800000-55d0a0810000 rw-p 00800000 08:01 42 /usr/bin/zkcron
Anonymous:             0 kB
55d0a1000000-55d0a2000000 rw-p 00000000 00:00 0 [heap]
Anonymous:          4000 kB
7f0000000000-7f0000001000 r-xp 00000000 00:00 0
Anonymous:             0 kB
7f0000010000-7f0000020000 r-xp 00028000 08:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7f0000030000-7f0000040000 rwxp 00000000 08:01 9 /tmp/jit
Anonymous:             0 kB
7f0000050000-7f0000060000 r--s 00000000 08:01 9 /tmp/shared
Anonymous:             0 kB
";
        assert_eq!(
            clean_file_mappings(smaps),
            [
                (0x55d0a0000000, 0x55d0a0100000),
                (0x55d0a0100000, 0x55d0a0700000),
                (0x7f0000010000, 0x7f0000020000)
            ]
        );
    }

    /// Released code runs again: the pages come back from the page cache.
    #[test]
    fn code_runs_after_its_pages_are_released() {
        release_code_pages();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        assert!(!clean_file_mappings(&smaps).is_empty(), "{smaps}");
        release_code_pages();
        assert_eq!(format!("{}", 6 * 7), "42");
    }
}
