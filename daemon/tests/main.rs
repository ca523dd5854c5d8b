//! The daemon's integration tests, built as one test binary: each file here is a module of it.
//! One binary links the daemon's library and its dependencies once, where a binary per file
//! linked them 34 times (~70 MB each, 2.4 GB of a CI machine's disk, and a link each).
//! Run one file's tests with `cargo test -p recalld --test integration lanes_park::`.

mod convo;
mod util;

mod bad_input;
mod crash;
mod data_io;
mod disk_full;
mod engine_cache;
mod engine_golden;
mod engine_info;
mod engine_props;
mod formats;
mod graph;
mod import;
mod inspect;
mod inspect_text;
mod instructions;
mod kill_loop;
mod lanes;
mod lanes_park;
mod lanes_rule;
mod many_connections;
mod metrics;
mod models;
mod models_openai;
mod peers;
mod quiet;
mod recall;
mod replay;
mod replay_messages;
mod scopes;
mod scopes_decay;
mod scopes_extract;
mod scopes_policy;
mod server;
mod systemd;
mod ui;
