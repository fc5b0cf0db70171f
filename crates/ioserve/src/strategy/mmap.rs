//! `mmap`: the range is written to the socket from the file's shared mapping.
//!
//! This process never reads the mapped bytes itself: it hands the mapping's addresses to
//! writev(2), and the kernel copies from them. A page beyond the end of a file truncated
//! meanwhile then makes writev fail with `EFAULT` instead of raising SIGBUS in the
//! server. Before each chunk the file's size is checked again, so a truncation stops the
//! body at the chunk boundary; only a truncation inside the chunk being written races.
//!
//! The mapping is made once per open file and shared by all its responses through the
//! open-file cache ([`SharedFile::mapping`]).

use std::io;

use memmap2::Advice;

use crate::cache::SharedFile;

/// Bytes handed to one writev(2). There is no buffer to size here (the mapping is the
/// buffer), so the window only bounds how stale the size check before it can be; 1 MiB
/// measured as fast as sendfile on 8 MiB downloads, where 128 KiB was 17% slower.
const WRITE_WINDOW: usize = 1 << 20;
use crate::output::Output;
use crate::range::ByteRange;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
) -> io::Result<()> {
    let map = file.mapping(range.end())?;
    let (start, end) = (range.start as usize, range.end() as usize);
    // A hint: readahead of the range into the page cache.
    let _ = map.advise_range(Advice::WillNeed, start, end - start);
    let mut done = start;
    while done < end {
        let next = (done + WRITE_WINDOW).min(end);
        if file.metadata()?.len() < next as u64 {
            return Err(super::file_shrank());
        }
        out.write(&map[done..next]).await.map_err(|e| {
            if e.raw_os_error() == Some(libc::EFAULT) {
                super::file_shrank()
            } else {
                e
            }
        })?;
        done = next;
    }
    Ok(())
}
