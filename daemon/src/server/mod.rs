//! The server: the Unix socket, connections, frames and dispatch of ops to the engine.
//!
//! Layers, as in mini-redis: `listener` binds the socket, `connection` turns bytes into
//! requests and replies into bytes, `dispatch` runs one request, `shutdown` says when to stop.
//! A bad frame gets an error reply on its own connection and harms no other.

mod connection;
mod dispatch;
mod listener;
pub mod metrics;
pub mod peer;
pub mod shutdown;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use crate::config::Settings;
use crate::engine::Engine;
pub use listener::{notify_ready, notify_stopping, BindError, Listener};
use shutdown::Shutdown;

/// What every connection shares.
pub struct AppState {
    pub engine: Arc<Engine>,
    pub max_frame_bytes: usize,
    pub max_in_flight: usize,
    pub started: Instant,
    pub counters: Counters,
    pub metrics: metrics::Metrics,
    /// Which namespace of memories each connecting uid gets.
    pub namespaces: peer::Namespaces,
}

#[derive(Default)]
pub struct Counters {
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub requests_total: AtomicU64,
    pub errors_total: AtomicU64,
    pub bad_frames_total: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl AppState {
    pub fn new(engine: Arc<Engine>, settings: &Settings) -> Self {
        AppState {
            engine,
            max_frame_bytes: settings.max_frame_bytes,
            max_in_flight: settings.max_in_flight,
            started: Instant::now(),
            counters: Counters::default(),
            metrics: metrics::Metrics::default(),
            namespaces: peer::Namespaces::default(),
        }
    }
}

/// Accepts connections until `shutdown` fires, then waits for every connection to finish the
/// requests it has in flight.
pub async fn serve(listener: Listener, state: Arc<AppState>, shutdown: Shutdown) {
    let mut connections = JoinSet::new();
    let mut next_id: u64 = 0;
    let mut stop = shutdown.clone();
    loop {
        tokio::select! {
            _ = stop.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(stream) => {
                    next_id += 1;
                    let state = state.clone();
                    let shutdown = shutdown.clone();
                    connections.spawn(connection::run(next_id, stream, state, shutdown));
                }
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    tracing::info!(
        open = connections.len(),
        "shutting down: no new connections; finishing in-flight requests"
    );
    while connections.join_next().await.is_some() {}
}
