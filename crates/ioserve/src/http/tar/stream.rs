//! Sending a planned tar: headers queued, each file's bytes through the IO strategy,
//! padding, the end blocks. A file that is not what the walk saw ends the response.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::sync::Arc;

use crate::http::site::Site;
use crate::http::tar::plan::{padding, Member, Plan, BLOCK, END};
use crate::io::byte_range::ByteRange;
use crate::io::output::Output;
use crate::io::shared_file::SharedFile;
use crate::io::strategy::Strategy;

/// Queued header bytes above which they are written before the next entry: a tree of
/// many directories or empty files does not gather in memory.
const QUEUE_LIMIT: usize = 64 * 1024;

/// Writes the queued head of `out` and then the tar of `plan`, file bodies sent by
/// `strategy` from files opened beneath `site`'s root.
///
/// Fails, after the head went out (so the connection closes on a short body), when a
/// file is gone, is not the file the walk saw (identity, size or modification time),
/// or shrinks while it is sent.
pub async fn send(
    out: &mut Output<'_>,
    strategy: &Strategy,
    site: &Arc<Site>,
    plan: &Plan,
) -> io::Result<()> {
    const ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];
    let mut queued = 0;
    for entry in &plan.entries {
        out.queue(&entry.header);
        queued += entry.header.len();
        let Some(member) = &entry.member else {
            if queued >= QUEUE_LIMIT {
                out.flush(true).await?;
                queued = 0;
            }
            continue;
        };
        let file = open_member(site, member).await?;
        strategy
            .send(
                out,
                &file,
                ByteRange {
                    start: 0,
                    len: member.size,
                },
            )
            .await?;
        out.queue(&ZEROS[..padding(member.size)]);
        queued = padding(member.size);
    }
    out.queue(&END);
    out.flush(false).await
}

/// Opens `member` on the blocking pool and checks that it is the file the walk saw.
async fn open_member(site: &Arc<Site>, member: &Member) -> io::Result<Arc<SharedFile>> {
    let site = Arc::clone(site);
    let wanted = member.clone();
    tokio::task::spawn_blocking(move || {
        let file = site.root.open_file(&wanted.relative)?;
        let meta = file.metadata()?;
        let now = Member {
            relative: wanted.relative.clone(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            identity: (meta.dev(), meta.ino()),
        };
        if !meta.is_file() || now != wanted {
            return Err(io::Error::other(format!(
                "{} changed since the tar's walk",
                wanted.relative.display()
            )));
        }
        Ok(Arc::new(SharedFile::new(file)))
    })
    .await
    .map_err(io::Error::other)?
}
