//! recalld-bench: the yardstick of issue 9. `recalld-bench replay` replays LoCoMo conversations
//! through a real daemon and scores evidence availability against retrieval baselines;
//! `recalld-bench load` drives it with real agent traffic and measures what that costs (issue 12).
//!
//! - `daemon`: a daemon started on a temporary data dir (and restarted on it).
//! - `locomo`: the data file format.
//! - `replay`: driving the daemon over the socket (the simulated model, `quiet` between turns).
//! - `score`: which evidence turns a request holds; token counts.
//! - `baselines`: full context, recency, BM25 and dense retrieval over turns.
//! - `evaluate`: every system scored on every question of a replay.
//! - `table`: aggregation into JSON and a markdown table.
//! - `traces`: the agent traces file; a trace made into one session of a memory.
//! - `agent`: a simulated agent and model playing sessions in one memory, answering note asks.
//! - `sampler`: lane depth and daemon RSS, polled while the load runs.
//! - `load`: the load mode's phases (traffic, drain, end state, ping floor, cold start).
//! - `load_report`: what it measured, as JSON and a Markdown table.
//! - `counting_model`: a local OpenAI-compatible endpoint that counts the model calls of the
//!   load mode's cost run.

pub mod agent;
pub mod baselines;
pub mod counting_model;
pub mod daemon;
pub mod evaluate;
pub mod load;
pub mod load_report;
pub mod locomo;
pub mod replay;
pub mod sampler;
pub mod score;
pub mod table;
pub mod traces;
