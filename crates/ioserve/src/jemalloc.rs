//! jemalloc as the global allocator (feature `jemalloc`, which the Debian package is
//! built with), linked from the system's shared library (Debian's `libjemalloc2`;
//! building needs `libjemalloc-dev`).
//!
//! Why: under the soak's hour of mixed HTTPS load glibc's malloc kept what it freed.
//! The live heap stayed at 6.2 MB (heaptrack) while the anonymous RSS grew in steps
//! of about 2 MiB, +2.5 % to +25 % per hour from run to run; `malloc_trim(0)` every
//! 30 s did not stop it (+63 % per hour in 15 minutes), nor did two arenas. jemalloc,
//! which returns freed pages to the kernel after a delay, held the same load flat
//! (-23 % per hour ± 6 in 15 minutes; mimalloc 2.0 still grew, +24 %).
//! tikv-jemallocator builds jemalloc from source: 3 minutes here for each profile and
//! target a CI run builds, against none for Debian's library.
//!
//! Rust's allocations go through jemalloc's own entry points (`mallocx` and
//! `sdallocx`, which only jemalloc has, so the library is linked and used whatever the
//! link order); it also exports `malloc` and `free`, which then serve the C code in
//! the process.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_char, c_int, c_void};

/// jemalloc's options, read at its start from this symbol (the library's own is weak;
/// `MALLOC_CONF` in the environment still applies over it).
///
/// `background_thread:true` (one thread): freed pages go back to the kernel on jemalloc's own
/// thread, after its decay time (10 s), even while the server allocates nothing.
/// Without it they are returned only when some later call into the allocator gets
/// round to it: a server whose keep-alive clients went idle (their connections parked
/// without a task, `serve::parking`) kept the memory of the tasks they had, 1.7 KB per
/// connection against 0.6 KB once returned (8,000 idle clients).
///
/// `thp:never`: jemalloc's mappings are marked `MADV_NOHUGEPAGE`. A kernel whose
/// transparent huge pages are `always` (Debian 12's stock kernel is built so) backs a
/// whole 2 MiB of heap as soon as any of it is touched, and a connection's buffers
/// are mostly untouched: h2's 16 KiB frame writer sends a few hundred bytes through
/// it. 4,000 idle HTTP/2 connections over TLS cost 54.8 KB each with huge pages
/// `always` against 32.4 KB with `madvise`, and 32.4 KB under `always` with this
/// option; the server's RssAnon at start, 43.7 MB against 10.2 MB.
#[unsafe(no_mangle)]
#[used]
pub static malloc_conf: Options =
    Options(c"background_thread:true,max_background_threads:1,thp:never".as_ptr());

/// A pointer to jemalloc's option string, as C declares `malloc_conf`.
#[derive(Debug)]
#[repr(transparent)]
pub struct Options(*const c_char);

// SAFETY: the pointer is to a constant C string that nothing ever writes.
unsafe impl Sync for Options {}

#[link(name = "jemalloc")]
unsafe extern "C" {
    fn mallocx(size: usize, flags: c_int) -> *mut c_void;
    fn rallocx(ptr: *mut c_void, size: usize, flags: c_int) -> *mut c_void;
    fn sdallocx(ptr: *mut c_void, size: usize, flags: c_int);
}

/// `MALLOCX_ZERO`: the memory comes zeroed.
const MALLOCX_ZERO: c_int = 0x40;

/// The alignment every allocation of jemalloc has without asking (16 bytes on x86_64
/// and aarch64).
const MIN_ALIGN: usize = 16;

/// The flags that ask for `layout`'s alignment: none when jemalloc gives it anyway,
/// else `MALLOCX_LG_ALIGN(log2(align))`, which is the logarithm itself.
fn align_flags(layout: Layout) -> c_int {
    if layout.align() <= MIN_ALIGN && layout.align() <= layout.size() {
        0
    } else {
        layout.align().trailing_zeros() as c_int
    }
}

/// The global allocator: `#[global_allocator] static A: Jemalloc = Jemalloc;`.
#[derive(Debug, Clone, Copy)]
pub struct Jemalloc;

// SAFETY: every pointer comes from mallocx or rallocx with the layout's alignment
// flags, and goes back to rallocx or sdallocx with the same flags and the size it was
// allocated with, as jemalloc's API requires; a failed allocation returns null.
unsafe impl GlobalAlloc for Jemalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: GlobalAlloc's callers never ask for zero bytes, which mallocx
        // does not allow.
        unsafe { mallocx(layout.size(), align_flags(layout)).cast() }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in alloc.
        unsafe { mallocx(layout.size(), align_flags(layout) | MALLOCX_ZERO).cast() }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated here with `layout` (GlobalAlloc's contract).
        unsafe { sdallocx(ptr.cast(), layout.size(), align_flags(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `new_size`, rounded up to the alignment, does not overflow isize
        // (GlobalAlloc's contract), and the alignment is the layout's, a power of two.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `ptr` was allocated here with `layout`, and `new_size` is not zero
        // (GlobalAlloc's contract); the alignment stays the same.
        unsafe { rallocx(ptr.cast(), new_size, align_flags(new)).cast() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_asked_only_beyond_what_jemalloc_gives() {
        assert_eq!(align_flags(Layout::from_size_align(64, 8).unwrap()), 0);
        assert_eq!(align_flags(Layout::from_size_align(64, 16).unwrap()), 0);
        // A small allocation is aligned to its size class, not to 16.
        assert_eq!(align_flags(Layout::from_size_align(8, 16).unwrap()), 4);
        assert_eq!(
            align_flags(Layout::from_size_align(4096, 4096).unwrap()),
            12
        );
    }

    #[test]
    fn allocations_keep_their_alignment_and_contents() {
        let a = Jemalloc;
        for (size, align) in [(1, 1), (24, 8), (8, 16), (100, 64), (5000, 4096)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero layout; the pointer is checked, written within its
            // size, reallocated and freed with the layouts it has.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null() && (p as usize).is_multiple_of(align));
                assert!((0..size).all(|i| *p.add(i) == 0));
                p.write_bytes(0xa5, size);
                let q = a.realloc(p, layout, size * 3);
                assert!(!q.is_null() && (q as usize).is_multiple_of(align));
                assert!((0..size).all(|i| *q.add(i) == 0xa5));
                a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
            }
        }
    }
}
