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

/// Installs the SIGTERM and SIGINT handlers at once (call it inside the runtime, before the
/// socket opens) and resolves on either. Installed lazily, at the first poll, a signal that came
/// once clients could connect killed the daemon by the default action instead of stopping it.
pub fn signals() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
