//! `mmap`: the range is written to the socket from the file's shared mapping.
//!
//! This process never reads the mapped bytes itself, nor forms a Rust slice over them:
//! it hands the mapping's addresses to writev(2) ([`Output::write_mapped`]), and the
//! kernel copies from them. A page beyond the end of a file truncated
//! meanwhile then makes writev fail with `EFAULT` instead of raising SIGBUS in the
//! server. Before each chunk after a range's first the file's size is checked again, so
//! a truncation stops the body at a chunk boundary. A range's first chunk goes without
//! the check, as the response's own fstat has just given the size; a truncation since
//! (during a multipart body's earlier parts, or inside a chunk being written) is caught
//! by that `EFAULT`, at the first page wholly past the new end.
//!
//! The mapping is made once per open file and shared by all its responses through the
//! open-file cache ([`SharedFile::mapping`]).

use std::io;

use memmap2::{Advice, MmapRaw, UncheckedAdvice};

use super::cold::ReadAhead;
use super::ended::{file_shrank, mapping_unreadable};
use crate::io::byte_range::ByteRange;
use crate::io::output::Output;
use crate::io::shared_file::SharedFile;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
    ahead: &mut ReadAhead<'_>,
) -> io::Result<()> {
    let map = file.mapping(range.end())?;
    let (start, end) = (range.start as usize, range.end() as usize);
    if !ahead.pooled() {
        // A hint: readahead of the range into the page cache. (With the pool the
        // read-ahead does it a window at a time, off the loop: WILLNEED submits the
        // reads of the whole range from this thread.)
        let _ = map.advise_range(Advice::WillNeed, start, end - start);
    }
    let mut done = start;
    while done < end {
        // Windows end on FAULT_SPAN boundaries: each block is faulted in once and its
        // page-table entries dropped once (MADV_DONTNEED only unmaps; the pages stay in
        // the page cache), so RSS is bounded by the windows in flight, not by the size
        // of the files served.
        let ready = ahead.ready(done as u64).await as usize;
        let next = (done + 1).next_multiple_of(FAULT_SPAN).min(end).min(ready);
        // A range's first chunk goes by the response's fstat: a small file's body is
        // one write, without a second fstat.
        if done != start && file.metadata()?.len() < next as u64 {
            return Err(file_shrank());
        }
        let written = out.write_mapped(&map, done, next).await;
        // A small file's pages are bounded by the file: keeping them mapped saves a
        // fault per response (mapped small files are at most the cache's size times this).
        if map.len() as u64 > KEEP_MAPPED {
            release(&map, done, next);
        }
        written.map_err(|e| {
            if e.raw_os_error() == Some(libc::EFAULT) {
                mapping_unreadable(file, done as u64, next as u64)
            } else {
                e
            }
        })?;
        done = next;
    }
    Ok(())
}

/// Files up to this size stay mapped between responses.
const KEEP_MAPPED: u64 = 16 << 10;

/// How far a fault may map around the faulting page, and the size of a write window: the kernel maps a whole large
/// folio of the page cache (up to the PMD size, 2 MiB on x86_64 and on arm64 with 4 KiB
/// pages) or a fault-around block (64 KiB), whichever is larger. Measured here: 1 MiB
/// ranges released only to their own pages left 1.6 MiB mapped per response.
const FAULT_SPAN: usize = 2 << 20;

/// Drops the page-table entries of `map[start..end]`, widened to the blocks a fault may
/// have filled; the pages stay in the page cache.
fn release(map: &MmapRaw, start: usize, end: usize) {
    let from = start - start % FAULT_SPAN;
    let end = end.next_multiple_of(FAULT_SPAN).min(map.len());
    // SAFETY: MADV_DONTNEED on a read-only shared (MAP_SHARED) file mapping drops only
    // the page-table entries: the pages stay in the page cache, and a later access maps
    // them again, so what the mapping shows (the file's contents) does not change. No
    // Rust reference into the mapping exists to be invalidated (it is an MmapRaw).
    let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, from, end - from) };
}
