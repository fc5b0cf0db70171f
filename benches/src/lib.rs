//! Criterion benches that reproduce the source documents' tables against peers.
//!
//! The benches are being built (see the project's benches issue).
