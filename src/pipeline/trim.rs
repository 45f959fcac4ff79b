//! Handing freed memory back to the operating system after a list. A full list (at start, or
//! after `410 Gone`) builds and drops a working set many times the known state (each object's
//! JSON, its event, the batch on its way to the sinks); glibc's allocator keeps what was freed
//! in its arenas, so the process stayed at its peak size (BENCHMARKS.md, the memory table
//! through a full re-list). Entry point: [`after_list`].

/// Asks the allocator to return free memory to the operating system, on the blocking pool (it
/// walks every arena). A no-op where the C library is not glibc.
pub fn after_list() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim takes a padding size and touches only the allocator's own state;
        // it is safe to call at any time from any thread.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released = released != 0,
            "freed memory returned after a list"
        );
    });
}
