//! recalld: a memory sidecar for LLM agents.
//!
//! Data flows one way: `server` (socket, frames, dispatch) → `engine` (decorate, report, the
//! mechanism) → `store` (LMDB, the source of truth); `formats` translates provider JSON and
//! `models` holds the embedder and the judge. `main.rs` only parses flags and calls [`run`].

pub mod client;
pub mod config;
pub mod engine;
pub mod formats;
pub mod index;
pub mod lanes;
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
    let store = Arc::new(store::Store::open(
        &settings.data_dir,
        &store::StoreOptions {
            map_size: settings.map_size,
        },
    )?);
    let models = models::Models::load(&settings.models, &settings.data_dir)?;
    tracing::info!(embedder = ?models.embedder.id(), judge = %models.judge.name(), "models loaded");
    record_embedder(&store, &models.embedder.id())?;
    let engine = Arc::new(engine::Engine::new(
        store.clone(),
        Some(models),
        settings.engine.clone(),
    ));
    let listener = server::Listener::open(&settings.socket, settings.socket_mode, settings.socket_group.as_deref())?;
    tracing::info!(socket = %listener.display, data = %settings.data_dir.display(), "listening");
    println!(
        "recalld {} listening on {}",
        env!("CARGO_PKG_VERSION"),
        listener.display
    );
    server::notify_ready();
    let lanes = lanes::Lanes::start(engine.clone(), settings.engine.lane_workers);
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
    lanes.stop();
    store.sync()?;
    tracing::info!("stopped");
    Ok(())
}

/// Keeps the embedding model's identity (name, dimension) with the data. A change is logged
/// and recorded, so vectors are never mixed across models: the derived vector indexes are
/// rebuilt from the store under the new identity (there are none yet; see ARCHITECTURE.md).
fn record_embedder(store: &store::Store, id: &models::ModelId) -> Result<(), store::StoreError> {
    const KEY: &[u8] = b"embedder";
    let stored: Option<models::ModelId> = store.read(|r| r.get(store::Table::Meta, KEY))?;
    if stored.as_ref() != Some(id) {
        if let Some(old) = &stored {
            tracing::warn!(from = ?old, to = ?id, "embedding model changed; derived vectors will be rebuilt");
        }
        store.write(|w| w.put(store::Table::Meta, KEY, id))?;
    }
    Ok(())
}
