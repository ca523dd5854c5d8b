//! recalld-bench: the yardstick of issue 9. `recalld-bench replay` replays LoCoMo conversations
//! through a real daemon and scores evidence availability against retrieval baselines.
//!
//! - `locomo`: the data file format.
//! - `replay`: driving the daemon over the socket (the simulated model, `quiet` between turns).
//! - `score`: which evidence turns a request holds; token counts.
//! - `baselines`: full context, recency, BM25 and dense retrieval over turns.
//! - `evaluate`: every system scored on every question of a replay.
//! - `table`: aggregation into JSON and a markdown table.

pub mod baselines;
pub mod evaluate;
pub mod locomo;
pub mod replay;
pub mod score;
pub mod table;
