//! A recalld daemon started by the benchmark on a temporary data dir, stopped when dropped.
//! It can be stopped and started again on the same data, to time a cold start.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built-in model's directory: `$RECALLD_MODEL_DIR`, else the repo's `models/`.
pub fn model_dir() -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("models/all-MiniLM-L6-v2"),
    }
}

/// The benchmark data dir: `$RECALLD_BENCH_DIR`, else `../shared/bench` beside the repo.
pub fn bench_dir() -> PathBuf {
    match std::env::var_os("RECALLD_BENCH_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("../shared/bench"),
    }
}

pub struct Daemon {
    child: Child,
    bin: PathBuf,
    log: String,
    pub socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `bin` on a new temporary dir; `engine` are lines of its `[engine]` section.
    pub fn start(bin: &Path, engine: &[String]) -> Result<Daemon, String> {
        Daemon::start_logging(bin, engine, "", "warn")
    }

    /// As `start`, logging at `log` unless `$RECALLD_LOG` says otherwise (the load mode would
    /// drown its output in one warning per late embedding; it counts them from `stats`).
    /// `more` is appended to the config file after the `[engine]` section (other sections).
    pub fn start_logging(bin: &Path, engine: &[String], more: &str, log: &str) -> Result<Daemon, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut toml = String::from("[engine]\n");
        for line in engine {
            toml.push_str(line);
            toml.push('\n');
        }
        toml.push('\n');
        toml.push_str(more);
        std::fs::write(dir.path().join("recalld.toml"), toml).map_err(|e| e.to_string())?;
        let socket = dir.path().join("recalld.sock");
        let log = std::env::var("RECALLD_LOG").unwrap_or_else(|_| log.into());
        let child = spawn(bin, dir.path(), &socket, &log)?;
        let mut d = Daemon {
            child,
            bin: bin.to_owned(),
            log,
            socket,
            dir,
        };
        d.wait_listening()?;
        Ok(d)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The store and its indexes (everything the daemon keeps).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Stops the daemon (SIGTERM, so it shuts down as in real use) and starts a new one on the
    /// same data; returns once the new one has been spawned, without waiting for it, so the
    /// caller can time how soon it answers.
    pub fn restart(&mut self) -> Result<Instant, String> {
        self.stop();
        let started = Instant::now();
        self.child = spawn(&self.bin, self.dir.path(), &self.socket, &self.log)?;
        Ok(started)
    }

    /// Polls until the socket accepts a connection (a fine poll: cold start is timed by it).
    pub fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited early: {status}", self.bin.display()));
            }
            if Instant::now() > deadline {
                return Err("the daemon did not listen within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the daemon as a child that gets SIGTERM when the thread that started it ends: a
/// benchmark killed (`kill`, a timeout) takes its daemon with it instead of leaving it serving,
/// and busy, beside the next run. (Its `Drop` stops it on every ordinary exit.)
fn spawn(bin: &Path, dir: &Path, socket: &Path, log: &str) -> Result<Child, String> {
    let mut command = Command::new(bin);
    // SAFETY: between fork and exec the closure makes one async-signal-safe call.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .arg("--data")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(dir.join("recalld.toml"))
        .env_remove("RECALLD_CONFIG")
        .env("RECALLD_LOG", log)
        .env("RECALLD_MODEL_DIR", model_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        // `RECALLD_BENCH_KEEP=DIR`: the stopped daemon's data directory is copied to DIR, to
        // look at what the store holds after a run (the temporary one is removed).
        if let Ok(to) = std::env::var("RECALLD_BENCH_KEEP") {
            let copied = Command::new("cp").arg("-r").arg(self.data_dir()).arg(&to).status();
            if !copied.is_ok_and(|s| s.success()) {
                eprintln!("could not copy the data directory to {to}");
            }
        }
    }
}
