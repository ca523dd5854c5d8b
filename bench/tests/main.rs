//! The replay benchmark's tests, built as one test binary: each file here is a module of it
//! (one link of the daemon's library and the benchmark instead of one per file).

mod common;

mod daemon;
mod load;
mod tiny;
