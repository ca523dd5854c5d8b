//! Binding the Unix socket: default mode 0600, an optional group, a stale socket from a dead
//! daemon replaced, a live one never stolen, and systemd socket activation (fd 3).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another recalld is already listening on {0}; stop it or choose another --socket")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("cannot create socket directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot bind {path}: {source}")]
    Bind { path: PathBuf, source: std::io::Error },
    #[error("socket group {0:?} does not exist")]
    NoSuchGroup(String),
    #[error("cannot set owner or mode of {path}: {source}")]
    Permissions { path: PathBuf, source: std::io::Error },
    #[error("socket activation: {0}")]
    Activation(std::io::Error),
}

pub struct Listener {
    inner: UnixListener,
    /// The path we created and remove on exit; None when systemd owns the socket.
    owned_path: Option<PathBuf>,
    pub display: String,
}

impl Listener {
    /// Takes the socket systemd passed (LISTEN_FDS), else binds `path`.
    pub fn open(path: &Path, mode: u32, group: Option<&str>) -> Result<Listener, BindError> {
        if let Some(listener) = from_systemd()? {
            return Ok(listener);
        }
        bind(path, mode, group)
    }

    pub async fn accept(&self) -> std::io::Result<UnixStream> {
        self.inner.accept().await.map(|(stream, _)| stream)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(path) = &self.owned_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn bind(path: &Path, mode: u32, group: Option<&str>) -> Result<Listener, BindError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|source| BindError::Dir {
                path: dir.into(),
                source,
            })?;
            let dir_mode = if group.is_some() { 0o750 } else { 0o700 };
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode)).map_err(|source| {
                BindError::Dir {
                    path: dir.into(),
                    source,
                }
            })?;
            if let Some(group) = group {
                chown_group(dir, group)?;
            }
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotASocket(path.into()));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(BindError::InUse(path.into())),
            Err(_) => {
                tracing::info!(path = %path.display(), "replacing stale socket");
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let inner = UnixListener::bind(path).map_err(|source| BindError::Bind {
        path: path.into(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| BindError::Permissions {
        path: path.into(),
        source,
    })?;
    if let Some(group) = group {
        chown_group(path, group)?;
    }
    Ok(Listener {
        inner,
        owned_path: Some(path.into()),
        display: path.display().to_string(),
    })
}

fn chown_group(path: &Path, group: &str) -> Result<(), BindError> {
    let gid = group_id(group).ok_or_else(|| BindError::NoSuchGroup(group.into()))?;
    std::os::unix::fs::chown(path, None, Some(gid)).map_err(|source| BindError::Permissions {
        path: path.into(),
        source,
    })
}

fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let cname = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam reads a NUL-terminated string and returns a pointer into static storage
    // or null; we copy the gid out before any other call.
    let entry = unsafe { libc::getgrnam(cname.as_ptr()) };
    if entry.is_null() {
        None
    } else {
        // SAFETY: non-null entry from getgrnam.
        Some(unsafe { (*entry).gr_gid })
    }
}

/// systemd socket activation: LISTEN_PID is us and LISTEN_FDS ≥ 1 → the socket is fd 3.
fn from_systemd() -> Result<Option<Listener>, BindError> {
    use std::os::unix::io::FromRawFd;
    let pid_matches = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let fds = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    if !pid_matches || fds < 1 {
        return Ok(None);
    }
    // SAFETY: systemd hands us fd 3 as a listening socket for our exclusive use.
    let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(3) };
    std_listener.set_nonblocking(true).map_err(BindError::Activation)?;
    let inner = UnixListener::from_std(std_listener).map_err(BindError::Activation)?;
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    Ok(Some(Listener {
        inner,
        owned_path: None,
        display: "fd 3 (systemd socket activation)".into(),
    }))
}

/// Tells systemd (Type=notify) that we are ready, when NOTIFY_SOCKET is set.
pub fn notify_ready() {
    notify(b"READY=1");
}

/// Tells systemd that we are stopping: no new connections, in-flight requests draining.
pub fn notify_stopping() {
    notify(b"STOPPING=1");
}

/// One datagram to $NOTIFY_SOCKET (a path, or `@name` for the abstract namespace).
fn notify(state: &[u8]) {
    let Ok(addr) = std::env::var("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(_) => return,
    };
    let sent = if let Some(name) = addr.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).and_then(|a| sock.send_to_addr(state, &a))
    } else {
        sock.send_to(state, &addr)
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}
