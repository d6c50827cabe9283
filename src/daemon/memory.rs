//! Giving memory freed after a burst back to the system.
//!
//! Loading 10,000 task files and reading 10,000 fire records allocate far more scratch memory
//! (file text, TOML trees, start-up futures) than what stays. glibc keeps what is freed in its
//! heaps, split into holes between the allocations that stay, and returns it to the kernel
//! only from the top of a heap; `malloc_trim` returns every free page of every heap. It is
//! called after a burst (a reload, the start of many tasks), never per tick.

/// Returns the free pages of the allocator's heaps to the kernel (glibc only; a no-op
/// elsewhere) and the cached parses of cron expressions (up to 650 KB, made again when a tick
/// needs one).
pub(super) fn release_free_memory() {
    crate::schedule::forget_cached_parses();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointer and only gives free pages of glibc's own heaps
        // back to the kernel; it locks each heap as malloc does, so it is thread-safe.
        unsafe {
            nix::libc::malloc_trim(0);
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
        // SAFETY: mallopt takes no pointer; M_ARENA_MAX only bounds the heaps glibc creates
        // from now on, and is safe to set while other threads allocate.
        unsafe {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
        }
    }
}
