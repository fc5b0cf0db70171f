//! `sendfile`: the kernel moves page-cache pages to the socket; no byte of the file
//! passes through this process.

use std::io;

use crate::cache::SharedFile;
use crate::output::Output;
use crate::range::ByteRange;

/// Largest count handed to one sendfile(2) call; the kernel caps it near 2 GiB anyway,
/// and on a non-blocking socket a call returns once the send buffer is full.
const MAX_PER_CALL: u64 = 1 << 30;

pub(super) async fn send(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
) -> io::Result<()> {
    out.flush(true).await?;
    let mut offset = range.start;
    while offset < range.end() {
        let count = (range.end() - offset).min(MAX_PER_CALL) as usize;
        if out.sendfile(file, &mut offset, count).await? == 0 {
            return Err(super::file_shrank());
        }
    }
    Ok(())
}
