//! Keeps the pages of large tensors mapped from one training step to the next.
//!
//! glibc's malloc serves a large block with a fresh `mmap` (until a block that size has been
//! freed once) and gives the free memory at the top of its heap back to the kernel whenever
//! more than twice that size lies there. A training step frees and allocates the same
//! buffers of megabytes every time, so each step faulted every page of them in again and the
//! kernel zeroed each one: a third of a 64-channel convolution's forward and backward,
//! measured. Raising both thresholds once, before the first large tensor, keeps those pages.
//!
//! The thresholds are the whole process's: in Python, the interpreter's too (up to 256 MiB of
//! freed memory stays with the process). Set `FERROGRAD_SYSTEM_MALLOC` (or any of glibc's own
//! `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, `MALLOC_TOP_PAD_`, `GLIBC_TUNABLES`) to
//! leave the allocator as it is. 64-bit glibc only (32-bit caps the threshold lower).

/// Blocks up to this size come from the heap (glibc's largest allowed threshold on 64-bit).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory kept at the top of the heap before any goes back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
const TRIM_THRESHOLD: i32 = 256 << 20;

/// Sets the thresholds, once per process, unless the environment says not to.
pub(crate) fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let opted_out = [
                "FERROGRAD_SYSTEM_MALLOC",
                "MALLOC_MMAP_THRESHOLD_",
                "MALLOC_TRIM_THRESHOLD_",
                "MALLOC_TOP_PAD_",
                "GLIBC_TUNABLES",
            ]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
            if opted_out {
                return;
            }
            // SAFETY: mallopt only changes glibc's tuning parameters (under the main arena's
            // lock). glibc documents it as MT-unsafe: another thread's malloc may read a
            // threshold while it changes, without a lock, and so act once more on the old
            // value (one more mmap or trim); the values are word-sized and never torn.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            }
        });
    }
}
