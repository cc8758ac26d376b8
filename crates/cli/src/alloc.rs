//! The process's allocator: mimalloc, with freed memory kept for reuse a while.
//!
//! With glibc, 64 KiB messages after a run of small ones measured 3–4× slower in
//! `bench unicast` (heap trimming and page faults on every burst), hence mimalloc. mimalloc in
//! turn *purges* (returns to the OS) memory 10 ms after it became free; a reliable sender
//! that allocates and frees 64 KiB buffers at line rate then spends ~35 % of its time in the
//! kernel zeroing the same pages again (`clear_page_erms` under page faults, measured with
//! `perf`). A ten-second purge delay keeps a busy node's working set mapped and still hands
//! memory back to the OS when the node goes quiet. Measured with `perf stat -e page-faults
//! viastack bench unicast --size 65536 --volume 1073741824 --only reliable_fifo` (1 GiB in
//! 64 KiB messages): 163,334 faults at mimalloc's default 10 ms, 2,447 (2 MiB THP faults) at
//! 1 s, 235 at 10 s — the warm-up only, the same as never purging. Throughput on an idle
//! machine went from 1.1 GB/s to 2.1 GB/s.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (`include/mimalloc.h`), which
/// `libmimalloc-sys` does not name. [`configure`] checks the option holds mimalloc's documented
/// default (10 ms) before changing it, so a renumbering in a later version is a no-op, not a
/// wrong setting.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's default purge delay (ms), documented beside the option.
const DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 10;
/// How long freed memory stays mapped before mimalloc returns it (ms).
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Sets the allocator's options; call first thing in `main`. Honours `MIMALLOC_PURGE_DELAY`
/// when the user set it.
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_get`/`mi_option_set` read and write mimalloc's option table; they take
    // plain integers, are thread-safe, and any option index below `_mi_option_last` is valid
    // (15 is, in both mimalloc v2 and v3).
    #[allow(unsafe_code)]
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == DEFAULT_PURGE_DELAY_MS {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configure_sets_the_purge_delay_unless_the_user_did() {
        configure();
        // SAFETY: reads mimalloc's option table (see `configure`).
        #[allow(unsafe_code)]
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(delay, PURGE_DELAY_MS);
        }
    }
}
