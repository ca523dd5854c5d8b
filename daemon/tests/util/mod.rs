//! Test helpers: start the real daemon binary on a temp socket and data dir; model doubles
//! for tests that drive the engine without the built-in model.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use recalld::client::Client;
use recalld::models::{CallCtx, Embedder, ModelError, ModelId};
use serde_json::Value;

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub data: PathBuf,
}

/// The built-in model: `$RECALLD_MODEL_DIR`, else `<repo>/models/all-MiniLM-L6-v2`
/// (`scripts/fetch-model.sh` puts it there).
pub fn model_dir() -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2"),
    }
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_recalld"))
}

impl Daemon {
    pub fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("recalld.sock");
        let data = dir.path().join("data");
        let mut d = Daemon {
            child: None,
            dir,
            socket,
            data,
        };
        d.spawn(&[]);
        d
    }

    pub fn start_with_config(config: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("recalld.sock");
        let data = dir.path().join("data");
        let cfg = dir.path().join("recalld.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut d = Daemon {
            child: None,
            dir,
            socket,
            data,
        };
        d.spawn(&["--config", cfg.to_str().unwrap()]);
        d
    }

    pub fn command(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--socket")
            .arg(&self.socket)
            .arg("--data")
            .arg(&self.data)
            .args(extra);
        cmd.env_remove("RECALLD_CONFIG")
            .env("RECALLD_LOG", "warn")
            .env("RECALLD_MODEL_DIR", model_dir());
        cmd
    }

    pub fn spawn(&mut self, extra: &[&str]) {
        let child = self
            .command(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_for_socket(&self.socket, self.child.as_mut().unwrap());
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket).unwrap()
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        status.code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn wait_for_socket(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("daemon exited early: {status}");
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("daemon did not listen on {} within 30 s", path.display());
}

pub fn code(result: Result<Value, recalld::client::ClientError>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.code().unwrap_or("no-code").to_string(),
    }
}

/// The ids a memory's indexes should hold by its export (fact n is 2n, passage n is 2n + 1).
pub fn indexed_ids(export: &Value) -> Vec<u64> {
    let mut ids: Vec<u64> = export["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["note"].as_str().is_some_and(|n| !n.is_empty()))
        .map(|f| 2 * f["n"].as_u64().unwrap())
        .chain(
            export["passages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| 2 * p["n"].as_u64().unwrap() + 1),
        )
        .collect();
    ids.sort_unstable();
    ids
}

/// Vectors from letter counts: alike texts are alike without a model.
pub struct LetterEmbedder;

impl Embedder for LetterEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: "test-letters".into(),
            dim: 26,
        }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 26];
                for c in t.to_lowercase().bytes().filter(u8::is_ascii_lowercase) {
                    v[(c - b'a') as usize] += 1.0;
                }
                v
            })
            .collect())
    }
}
