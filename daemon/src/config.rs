//! Configuration: built-in defaults, then a TOML file, then environment variables, then flags.
//!
//! `FileConfig` is what a TOML file may say (unknown keys are rejected); `Settings` is the
//! resolved result the daemon runs with. Paths are resolved here, once, so the rest of the
//! daemon never reads the environment.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::engine::EngineConfig;
use crate::models::ModelsConfig;
use crate::server::peer::PeersConfig;

/// What a TOML config file may contain. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub socket: Option<PathBuf>,
    pub data: Option<PathBuf>,
    /// Octal mode of the socket file, e.g. `0o660`. Default 0o600.
    pub socket_mode: Option<u32>,
    /// Group that owns the socket file (for a shared host). Implies mode 0o660 unless set.
    pub socket_group: Option<String>,
    pub max_frame_bytes: Option<usize>,
    /// Requests one connection may have in flight at once.
    pub max_in_flight: Option<usize>,
    /// tracing filter, e.g. "info" or "recalld=debug".
    pub log: Option<String>,
    /// Initial LMDB map size in bytes (grows by itself).
    pub map_size: Option<usize>,
    /// What a commit waits for: "data" (default) or "full" (see `store::Durability`).
    pub sync: Option<crate::store::Durability>,
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub models: ModelsConfig,
    /// Peer credentials: one namespace of memories per uid, and who may share an agent's.
    #[serde(default)]
    pub peers: PeersConfig,
}

/// Overrides from the command line (flags win over everything).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub data: Option<PathBuf>,
    pub log: Option<String>,
}

/// The environment, passed in so resolution is testable without touching the process.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

#[derive(Debug)]
pub struct Settings {
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    pub socket_mode: u32,
    pub socket_group: Option<String>,
    pub max_frame_bytes: usize,
    pub max_in_flight: usize,
    pub log: String,
    pub map_size: usize,
    pub sync: crate::store::Durability,
    pub engine: EngineConfig,
    pub models: ModelsConfig,
    pub peers: PeersConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {name}: {message}")]
    Env { name: &'static str, message: String },
    #[error("cannot tell where to keep data: set RECALLD_DATA, XDG_DATA_HOME or HOME")]
    NoDataDir,
}

pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

impl Settings {
    pub fn resolve(over: &Overrides, env: &dyn Env) -> Result<Settings, ConfigError> {
        let file_path = over
            .config
            .clone()
            .or_else(|| env.var("RECALLD_CONFIG").map(PathBuf::from));
        let file = match &file_path {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let socket = over
            .socket
            .clone()
            .or_else(|| env.var("RECALLD_SOCKET").map(|s| PathBuf::from(strip_unix_scheme(&s))))
            .or(file.socket)
            .unwrap_or_else(|| default_socket(env));
        let data_dir = match over
            .data
            .clone()
            .or_else(|| env.var("RECALLD_DATA").map(PathBuf::from))
            .or(file.data)
        {
            Some(d) => d,
            None => default_data_dir(env)?,
        };
        let max_frame_bytes = match env.var("RECALLD_MAX_FRAME_BYTES") {
            Some(v) => v.parse().map_err(|_| ConfigError::Env {
                name: "RECALLD_MAX_FRAME_BYTES",
                message: format!("{v:?} is not a number of bytes"),
            })?,
            None => file
                .max_frame_bytes
                .unwrap_or(recalld_protocol::DEFAULT_MAX_FRAME_BYTES),
        };
        let socket_mode = file
            .socket_mode
            .unwrap_or(if file.socket_group.is_some() { 0o660 } else { 0o600 });
        Ok(Settings {
            socket,
            data_dir,
            socket_mode,
            socket_group: file.socket_group,
            max_frame_bytes,
            max_in_flight: file.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT).max(1),
            log: over
                .log
                .clone()
                .or_else(|| env.var("RECALLD_LOG"))
                .or(file.log)
                .unwrap_or_else(|| "info".into()),
            map_size: file.map_size.unwrap_or(1 << 30),
            sync: file.sync.unwrap_or_default(),
            engine: file.engine,
            models: file.models,
            peers: file.peers,
        })
    }
}

fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_file(&text).map_err(|message| ConfigError::Parse {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses a TOML config text; unknown keys are errors.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim().to_string())
}

fn strip_unix_scheme(s: &str) -> &str {
    s.strip_prefix("unix://").unwrap_or(s)
}

/// `$XDG_RUNTIME_DIR/recalld/recalld.sock`, else `/tmp/recalld-<uid>/recalld.sock`.
pub fn default_socket(env: &dyn Env) -> PathBuf {
    match env.var("XDG_RUNTIME_DIR") {
        Some(dir) => PathBuf::from(dir).join("recalld").join("recalld.sock"),
        None => PathBuf::from(format!("/tmp/recalld-{}", current_uid())).join("recalld.sock"),
    }
}

fn default_data_dir(env: &dyn Env) -> Result<PathBuf, ConfigError> {
    if let Some(dir) = env.var("XDG_DATA_HOME") {
        return Ok(PathBuf::from(dir).join("recalld"));
    }
    match env.var("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/recalld")),
        None => Err(ConfigError::NoDataDir),
    }
}

pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, &'static str>);
    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|s| s.to_string())
        }
    }

    #[test]
    fn defaults_follow_xdg() {
        let env = MapEnv(HashMap::from([("XDG_RUNTIME_DIR", "/run/user/7"), ("HOME", "/home/u")]));
        let s = Settings::resolve(&Overrides::default(), &env).unwrap();
        assert_eq!(s.socket, PathBuf::from("/run/user/7/recalld/recalld.sock"));
        assert_eq!(s.data_dir, PathBuf::from("/home/u/.local/share/recalld"));
        assert_eq!(s.socket_mode, 0o600);
        assert_eq!(s.max_frame_bytes, 64 * 1024 * 1024);
    }

    #[test]
    fn env_beats_file_and_flags_beat_env() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("r.toml");
        std::fs::write(&cfg, "socket = \"/from/file.sock\"\ndata = \"/from/file\"\n").unwrap();
        let env = MapEnv(HashMap::from([
            ("RECALLD_SOCKET", "unix:///from/env.sock"),
            ("HOME", "/h"),
        ]));
        let over = Overrides {
            config: Some(cfg.clone()),
            ..Default::default()
        };
        let s = Settings::resolve(&over, &env).unwrap();
        assert_eq!(s.socket, PathBuf::from("/from/env.sock"));
        assert_eq!(s.data_dir, PathBuf::from("/from/file"));
        let over = Overrides {
            config: Some(cfg),
            socket: Some("/flag.sock".into()),
            ..Default::default()
        };
        assert_eq!(
            Settings::resolve(&over, &env).unwrap().socket,
            PathBuf::from("/flag.sock")
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = parse_file("sockte = \"/x\"\n").unwrap_err();
        assert!(err.contains("sockte"), "{err}");
    }

    #[test]
    fn commits_flush_their_data_unless_full_sync_is_asked() {
        use crate::store::Durability;
        assert_eq!(parse_file("").unwrap().sync.unwrap_or_default(), Durability::Data);
        assert_eq!(parse_file("sync = \"full\"\n").unwrap().sync, Some(Durability::Full));
        assert_eq!(parse_file("sync = \"data\"\n").unwrap().sync, Some(Durability::Data));
        let err = parse_file("sync = \"never\"\n").unwrap_err();
        assert!(err.contains("never"), "{err}");
    }

    #[test]
    fn the_documented_example_parses() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/recalld.example.toml")).unwrap();
        parse_file(&text).unwrap();
    }

    #[test]
    fn decay_days_are_set_per_policy_and_checked() {
        parse_file("[engine.scopes.decay_days.conversational]\ngeneral = 7.0\n").unwrap();
        let err = parse_file("[engine.scopes.decay_days.conversational]\ngeneal = 7.0\n").unwrap_err();
        assert!(err.contains("geneal"), "{err}");
        assert!(parse_file("[engine.scopes.decay_days.chatty]\ngeneral = 7.0\n").is_err());
    }

    #[test]
    fn group_implies_group_mode() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("r.toml");
        std::fs::write(&cfg, "socket_group = \"agents\"\n").unwrap();
        let env = MapEnv(HashMap::from([("HOME", "/h")]));
        let s = Settings::resolve(
            &Overrides {
                config: Some(cfg),
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        assert_eq!(s.socket_mode, 0o660);
    }
}
