//! `mmap`: the range is mapped and written to the socket from the mapping.
//!
//! This process never reads the mapped bytes itself: it hands the mapping's addresses to
//! writev(2), and the kernel copies from them. A page beyond the end of a file truncated
//! meanwhile then makes writev fail with `EFAULT` instead of raising SIGBUS in the
//! server. Before each chunk the file's size is checked again, so a truncation stops the
//! body at the chunk boundary; only a truncation inside the chunk being written races.

use std::fs::File;
use std::io;

use memmap2::{Advice, MmapOptions};

use crate::output::Output;
use crate::range::ByteRange;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &File,
    range: ByteRange,
    chunk_size: usize,
) -> io::Result<()> {
    let page = rustix::param::page_size() as u64;
    let map_start = range.start - range.start % page;
    let lead = (range.start - map_start) as usize;
    let map_len = usize::try_from(range.len)
        .ok()
        .and_then(|len| len.checked_add(lead))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "range larger than the address space",
            )
        })?;
    // SAFETY: the mapping is read-only and private to this call. Its bytes are never read
    // by this process, only passed to writev(2), so a concurrent truncation or rewrite of
    // the file cannot fault in (or be observed by) Rust code; the kernel reports EFAULT.
    let map = unsafe {
        MmapOptions::new()
            .offset(map_start)
            .len(map_len)
            .map(file)?
    };
    // Advice is a hint: a kernel that ignores it serves the same bytes.
    let _ = map.advise(Advice::Sequential);
    let _ = map.advise(Advice::WillNeed);

    let body = &map[lead..];
    let mut done = 0;
    while done < body.len() {
        let end = (done + chunk_size).min(body.len());
        if file.metadata()?.len() < range.start + end as u64 {
            return Err(super::file_shrank());
        }
        out.write(&body[done..end]).await.map_err(|e| {
            if e.raw_os_error() == Some(libc::EFAULT) {
                super::file_shrank()
            } else {
                e
            }
        })?;
        done = end;
    }
    Ok(())
}
