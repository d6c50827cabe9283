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
//! [`release_code_pages`] unmaps them; the kernel maps a page back from its page cache the
//! next time it runs (a minor fault).

/// Returns the free pages of the allocator's heaps to the kernel (glibc only; a no-op
/// elsewhere), and the pages of code run since the last call ([`release_code_pages`]).
pub(super) fn release_free_memory() {
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

/// Unmaps the pages of code (file-backed mappings that are executable and not writable: the
/// program's `.text`, the C library's) that this process has in memory: clean copies of
/// files the kernel keeps in its page cache, so nothing is lost and the next call of a function
/// maps its page again. Code is never written, so `MADV_DONTNEED` cannot discard a change.
/// Linux only; a no-op elsewhere and when `/proc/self/maps` cannot be read.
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
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        for (start, end) in code_mappings(&maps) {
            // SAFETY: [start, end) is a whole mapping of this process, read-only and
            // executable, backed by a file: MADV_DONTNEED drops the page-table entries, and
            // the next access faults the same bytes back in from the file's page cache. No
            // Rust object lives in such a mapping.
            unsafe {
                madvise(start as *mut std::ffi::c_void, end - start, MADV_DONTNEED);
            }
        }
    }
}

/// The address ranges of the mappings in `maps` (the text of `/proc/self/maps`) that are
/// file-backed code: permissions `r-xp` and a path (not `[vdso]` and the like).
fn code_mappings(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            if perms != "r-xp" || !path.starts_with('/') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (start < end).then_some((start, end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_backed_code_mappings_are_released() {
        let maps = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 42 /usr/bin/zkcron
55d0a0100000-55d0a0700000 r-xp 00100000 08:01 42 /usr/bin/zkcron
55d0a0700000-55d0a0800000 r--p 00700000 08:01 42 /usr/bin/zkcron
55d0a0800000-55d0a0810000 rw-p 00800000 08:01 42 /usr/bin/zkcron
55d0a1000000-55d0a2000000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 r-xp 00000000 00:00 0
7f0000010000-7f0000020000 r-xp 00028000 08:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0 [vdso]
7f0000030000-7f0000040000 rwxp 00000000 08:01 9 /tmp/jit
";
        assert_eq!(
            code_mappings(maps),
            [
                (0x55d0a0100000, 0x55d0a0700000),
                (0x7f0000010000, 0x7f0000020000)
            ]
        );
    }

    /// Released code runs again: the pages come back from the page cache.
    #[test]
    fn code_runs_after_its_pages_are_released() {
        release_code_pages();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!code_mappings(&maps).is_empty(), "{maps}");
        release_code_pages();
        assert_eq!(format!("{}", 6 * 7), "42");
    }
}
