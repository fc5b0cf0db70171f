//! A directory as one download: `GET /dir/?download=tar` streams the directory as a tar.
//!
//! The walk ([`walk`]) `stat`s every entry on the blocking pool before the head is sent
//! and builds a [`plan::Plan`]: each entry's 512-byte header block(s) (GNU format, with
//! a GNU long-name block for names over 100 bytes) and, for a regular file, what it
//! was when walked. So the exact `Content-Length` is known before the first byte: the
//! sum over entries of header blocks plus the file size padded to 512, plus the two
//! closing zero blocks.
//!
//! [`stream`] sends the plan: a file's bytes go through the selected IO strategy as
//! the range `(file, 0, len)`. A file whose size, modification time or identity
//! changed since the walk, or that shrinks while sent, ends the response early (the
//! connection closes): the client sees a short body, never a tar that lies.

pub mod plan;
pub mod stream;
pub mod walk;
