//! recalld: a memory sidecar for LLM agents.
//!
//! Data flows one way: `server` (socket, frames, dispatch) → `engine` (decorate, report, the
//! mechanism) → `store` (LMDB, the source of truth); `formats` translates provider JSON and
//! `models` holds the embedder and the judge. `main.rs` only parses flags and calls [`run`].

pub mod client;
pub mod config;
pub mod engine;
pub mod formats;
pub mod models;
pub mod server;
pub mod store;

use std::sync::Arc;

use config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Bind(#[from] server::BindError),
    #[error(transparent)]
    Models(#[from] models::ModelError),
}

/// Opens the store, binds the socket and serves until `stop` resolves; then finishes in-flight
/// requests, flushes and returns.
pub async fn run(settings: Settings, stop: impl std::future::Future<Output = ()>) -> Result<(), StartError> {
    let store = Arc::new(store::Store::open(&settings.data_dir, &store::StoreOptions { map_size: settings.map_size })?);
    let models = models::Models::load(&settings.models, &settings.data_dir)?;
    tracing::info!(embedder = ?models.embedder.id(), judge = %models.judge.name(), "models loaded");
    let engine = Arc::new(engine::Engine::new(store.clone(), Some(models), settings.engine.clone()));
    let listener = server::Listener::open(&settings.socket, settings.socket_mode, settings.socket_group.as_deref())?;
    tracing::info!(socket = %listener.display, data = %settings.data_dir.display(), "listening");
    println!("recalld {} listening on {}", env!("CARGO_PKG_VERSION"), listener.display);
    server::notify_ready();
    let state = Arc::new(server::AppState::new(engine, &settings));
    let (trigger, shutdown) = server::shutdown::channel();
    let serving = server::serve(listener, state, shutdown);
    tokio::pin!(serving);
    tokio::select! {
        _ = &mut serving => {}
        _ = stop => {
            trigger.fire();
            serving.await;
        }
    }
    store.sync()?;
    tracing::info!("stopped");
    Ok(())
}
