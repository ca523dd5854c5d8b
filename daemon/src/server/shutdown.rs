//! Shutdown: one watch channel that every task can wait on.

use tokio::sync::watch;

#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

pub struct Trigger {
    tx: watch::Sender<bool>,
}

pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    pub fn fire(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// Resolves once shutdown has been asked for (at once if it already was).
    pub async fn wait(&mut self) {
        let _ = self.rx.wait_for(|stop| *stop).await;
    }

    pub fn is_set(&self) -> bool {
        *self.rx.borrow()
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn signals() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
