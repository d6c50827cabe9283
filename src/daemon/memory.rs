//! Giving memory freed after a burst back to the system.
//!
//! Loading 10,000 task files and reading 10,000 fire records allocate far more scratch memory
//! (file text, TOML trees, start-up futures) than what stays. glibc keeps what is freed in its
//! heaps, split into holes between the allocations that stay, and returns it to the kernel
//! only from the top of a heap; `malloc_trim` returns every free page of every heap. It is
//! called after a burst (a reload, the start of many tasks), never per tick.

/// Returns the free pages of the allocator's heaps to the kernel (glibc only; a no-op
/// elsewhere).
pub(super) fn release_free_memory() {
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
