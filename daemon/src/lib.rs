//! recalld: a memory sidecar for LLM agents.
//!
//! Data flows one way: `server` (socket, frames, dispatch) → `engine` (decorate, report, the
//! mechanism) → `store` (LMDB, the source of truth); `formats` translates provider JSON and
//! `models` holds the embedder and the judge. `main.rs` only parses flags and calls [`run`].

pub mod admin;
pub mod client;
pub mod config;
pub mod cpu;
pub mod engine;
pub mod formats;
pub mod index;
pub mod inspect;
pub mod lanes;
pub mod models;
pub mod server;
pub mod store;
pub mod ui;
pub mod units;

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
    #[error(transparent)]
    Peers(#[from] server::peer::PeerError),
}

/// Opens the store, binds the socket and serves until `stop` resolves; then finishes in-flight
/// requests, flushes and returns.
pub async fn run(settings: Settings, stop: impl std::future::Future<Output = ()>) -> Result<(), StartError> {
    let namespaces = server::peer::Namespaces::resolve(&settings.peers)?;
    let store = Arc::new(store::Store::open(
        &settings.data_dir,
        &store::StoreOptions {
            map_size: settings.map_size,
            sync: settings.sync,
        },
    )?);
    let models = models::Models::load(&settings.models, &settings.data_dir)?;
    tracing::info!(embedder = ?models.embedder.id(), judge = %models.judge.name(), "models loaded");
    let changed = record_embedder(&store, &models.embedder.id())?;
    let engine = Arc::new(engine::Engine::new(
        store.clone(),
        Some(models),
        settings.engine.clone(),
    ));
    if changed {
        match engine.queue_reembed() {
            Ok(n) => tracing::info!(memories = n, "re-embedding stored vectors in the background"),
            Err(e) => tracing::error!(error = %e, "cannot queue re-embedding"),
        }
    }
    // Finding indexes behind the store is a read of the memories table; catching them up can
    // take seconds over much data, so it runs once the socket is open (recall skips a memory
    // until its indexes are caught up; its lane catches it up first).
    let behind = match engine.find_indexes_behind() {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "cannot check the search indexes");
            0
        }
    };
    let listener = server::Listener::open(&settings.socket, settings.socket_mode, settings.socket_group.as_deref())?;
    tracing::info!(socket = %listener.display, data = %settings.data_dir.display(), "listening");
    println!(
        "recalld {} listening on {}",
        env!("CARGO_PKG_VERSION"),
        listener.display
    );
    server::notify_ready();
    let lanes = lanes::Lanes::start(
        engine.clone(),
        settings.engine.lane_workers,
        settings.engine.lane_model_threads,
    );
    // The model's first pass and the recently used memories, beside the socket (`warm`).
    let e = engine.clone();
    let local_model = settings.models.embedder.provider == models::Provider::Builtin;
    let spawned = std::thread::Builder::new().name("recalld-warm".into()).spawn(move || {
        cpu::background_thread();
        e.warm(local_model);
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the warm-up thread; memories load at first use");
    }
    if behind > 0 {
        let e = engine.clone();
        let spawned = std::thread::Builder::new()
            .name("recalld-index-catch-up".into())
            .spawn(move || {
                let n = e.catch_up_indexes();
                tracing::info!(memories = n, "search indexes brought up to the store");
            });
        if let Err(e) = spawned {
            // Each memory's lane still catches its indexes up before its next job.
            tracing::error!(error = %e, "cannot start the index catch-up thread");
        }
    }
    let timer = tokio::spawn(scopes_timer(engine.clone()));
    let flushing = engine.clone();
    let mut state = server::AppState::new(engine, &settings);
    state.namespaces = namespaces;
    let state = Arc::new(state);
    let (trigger, shutdown) = server::shutdown::channel();
    let serving = server::serve(listener, state, shutdown);
    tokio::pin!(serving);
    tokio::select! {
        _ = &mut serving => {}
        _ = stop => {
            server::notify_stopping();
            trigger.fire();
            serving.await;
        }
    }
    timer.abort();
    lanes.stop();
    flushing.flush_indexes();
    store.sync()?;
    tracing::info!("stopped");
    Ok(())
}

/// The scopes' clock: memories quiet for `quiet_minutes` hand their facts to their agents'
/// scopes, and agents not swept for `sweep_hours` are swept. Ticks every minute (sooner when
/// the quiet time is shorter).
async fn scopes_timer(engine: Arc<engine::Engine>) {
    let quiet = engine.config().scopes.quiet_minutes * 60.0;
    let tick = std::time::Duration::from_secs_f64((quiet / 2.0).clamp(0.5, 60.0));
    loop {
        tokio::time::sleep(tick).await;
        let e = engine.clone();
        let done = tokio::task::spawn_blocking(move || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            if let Err(err) = e.queue_quiet_handoffs(now) {
                tracing::warn!(error = %err, "cannot queue the handoffs of quiet memories");
            }
            if let Err(err) = e.sweep_due(now) {
                tracing::warn!(error = %err, "sweep failed");
            }
        })
        .await;
        if done.is_err() {
            tracing::error!("the scopes timer's work panicked");
        }
    }
}

/// Keeps the embedding model's identity (name, dimension) with the data. Returns true when it
/// changed from a recorded one: every memory's stored vectors are then embedded again in the
/// background (each vector names its model, so old and new are never mixed).
fn record_embedder(store: &store::Store, id: &models::ModelId) -> Result<bool, store::StoreError> {
    const KEY: &[u8] = b"embedder";
    let stored: Option<models::ModelId> = store.read(|r| r.get(store::Table::Meta, KEY))?;
    if stored.as_ref() == Some(id) {
        return Ok(false);
    }
    if let Some(old) = &stored {
        tracing::warn!(from = ?old, to = ?id, "embedding model changed; stored vectors will be embedded again");
    }
    store.write(|w| w.put(store::Table::Meta, KEY, id))?;
    Ok(stored.is_some())
}
