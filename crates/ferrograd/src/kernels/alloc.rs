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

/// Blocks from this size up are fresh mappings (above [`MMAP_THRESHOLD`]) worth backing with
/// huge pages.
const HUGE_BLOCK: usize = 32 << 20;

/// A transparent huge page on x86-64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the unwritten block of `v` with huge pages where it is large: a
/// fresh mapping of hundreds of megabytes (a batch of per-example gradients) otherwise faults
/// in one 4 KiB page at a time, which costs more than writing it. The first such block of a
/// process may wait for the kernel to gather free huge pages, once. Where the kernel's transparent huge pages are
/// off, nothing changes; `FERROGRAD_SYSTEM_MALLOC` turns this off with the rest.
pub(crate) fn advise_huge_pages<T>(v: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = || *ON.get_or_init(|| std::env::var_os("FERROGRAD_SYSTEM_MALLOC").is_none());
        if bytes < HUGE_BLOCK || !on() {
            return;
        }
        let start = v.as_mut_ptr() as usize;
        let first = start.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > first {
            // SAFETY: madvise reads no memory and changes no contents: it advises the kernel
            // on how to back pages of this allocation, which `v` owns, inside its bounds.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}
