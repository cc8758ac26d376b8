//! The process's allocator: mimalloc, with freed memory kept for reuse a while.
//!
//! With glibc, 64 KiB messages after a run of small ones measured 3–4× slower in
//! `bench unicast` (heap trimming and page faults on every burst), hence mimalloc. mimalloc in
//! turn *purges* (returns to the OS) memory a while after it became free (1 s in mimalloc 3.3,
//! `src/options.c`); a reliable sender that allocates and frees 64 KiB buffers at line rate
//! then keeps faulting in and zeroing fresh 2 MiB pages (`clear_page_erms` under page faults,
//! measured with `perf`). A ten-second purge delay keeps a busy node's working set mapped and still hands
//! memory back to the OS when the node goes quiet. Measured with `perf stat -e page-faults
//! viastack bench unicast --size 65536 --volume 1073741824 --only reliable_fifo` (1 GiB in
//! 64 KiB messages): 163,334 faults at 10 ms, 2,447 (2 MiB THP faults) at mimalloc's default
//! 1 s, 235 at 10 s — the warm-up only, the same as never purging.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (`include/mimalloc.h`), which
/// `libmimalloc-sys` does not name. [`configure`] sets it only when the linked mimalloc is a
/// 3.x release, whose option table this index was read from, so another version leaves the
/// allocator as it is rather than set a wrong option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// The mimalloc versions (`major * 10000 + minor * 100 + patch`) the index holds for.
const MIMALLOC_3: std::ops::Range<std::ffi::c_int> = 30_000..40_000;
/// How long freed memory stays mapped before mimalloc returns it (ms).
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Sets the allocator's options; call first thing in `main`. Honours `MIMALLOC_PURGE_DELAY`
/// when the user set it.
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_version`, `mi_option_set` read mimalloc's version and write its option
    // table; they take plain integers, are thread-safe, and any option index below
    // `_mi_option_last` is valid (15 is, in mimalloc 2 and 3).
    #[allow(unsafe_code)]
    unsafe {
        if MIMALLOC_3.contains(&libmimalloc_sys::mi_version()) {
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
        // SAFETY: reads mimalloc's version and option table (see `configure`).
        #[allow(unsafe_code)]
        let (version, delay) = unsafe {
            (
                libmimalloc_sys::mi_version(),
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
            )
        };
        // A mimalloc upgrade must re-check the option index before this passes again.
        assert!(MIMALLOC_3.contains(&version), "mimalloc {version}");
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(delay, PURGE_DELAY_MS);
        }
    }
}
