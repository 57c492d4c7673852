//! The C allocator's settings for an operator's process.
//!
//! glibc's `malloc` gives each new thread a heap of its own (an *arena*, up to eight per core), and
//! each arena keeps its own free space. A manager's threads (tokio's workers, its blocking pool) are
//! few and mostly wait, so the extra arenas buy no speed and hold memory: in the benchmark, a
//! manager with one arena held about 2 MiB less at N=1000, at the same CPU and times (see
//! docs/benchmarks.md). musl's allocator, in the image's static build, has one heap anyway.

/// Keeps glibc's `malloc` to one arena for the whole process. Call it first in `main`, before any
/// thread starts (before tokio's runtime): a thread keeps the arena it was given.
///
/// It does nothing where the C library is not glibc. `MALLOC_ARENA_MAX` in the environment, if set,
/// is overridden.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` sets one of the allocator's parameters; glibc takes the lock it needs, and a
    // parameter that it refuses is left as it was (the return value, ignored here).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
