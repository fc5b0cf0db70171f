//! What is built for people to run elsewhere: aarch64 builds (the toolchain and the CI
//! lane) and the cross tarball.

pub(crate) mod aarch64;
pub(crate) mod cross;
