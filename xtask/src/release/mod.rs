//! What is built for people to run elsewhere: aarch64 builds (the toolchain and the CI
//! lane), the cross tarball, and the Debian packages.

pub(crate) mod aarch64;
pub(crate) mod cross;
pub(crate) mod dist;
