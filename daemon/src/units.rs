//! systemd unit files: the ones in `systemd/` are built into the binary, so `recalld
//! install-units` can put them in place with `ExecStart` pointing at this very binary.

use std::path::{Path, PathBuf};

/// Which manager the units are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One daemon for the host (`/etc/systemd/system`, user and group `recalld`).
    System,
    /// One daemon per user (`~/.config/systemd/user`, `systemctl --user`).
    User,
}

const SYSTEM_SERVICE: &str = include_str!("../../systemd/system/recalld.service");
const SYSTEM_SOCKET: &str = include_str!("../../systemd/system/recalld.socket");
const USER_SERVICE: &str = include_str!("../../systemd/user/recalld.service");
const USER_SOCKET: &str = include_str!("../../systemd/user/recalld.socket");
/// The binary path the shipped files name (the Debian package's).
const SHIPPED_BIN: &str = "/usr/bin/recalld";

/// The unit files for `scope`, as (file name, text), with `ExecStart` naming `bin`.
pub fn render(scope: Scope, bin: &Path) -> Vec<(&'static str, String)> {
    let (service, socket) = match scope {
        Scope::System => (SYSTEM_SERVICE, SYSTEM_SOCKET),
        Scope::User => (USER_SERVICE, USER_SOCKET),
    };
    let exec = format!("ExecStart={} ", bin.display());
    vec![
        (
            "recalld.service",
            service.replace(&format!("ExecStart={SHIPPED_BIN} "), &exec),
        ),
        ("recalld.socket", socket.to_string()),
    ]
}

/// Where the manager reads units from when no directory is given.
pub fn default_dir(scope: Scope) -> Option<PathBuf> {
    match scope {
        Scope::System => Some(PathBuf::from("/etc/systemd/system")),
        Scope::User => {
            if let Some(d) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
                return Some(PathBuf::from(d).join("systemd/user"));
            }
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".config/systemd/user"))
        }
    }
}

/// Writes the units into `dir` (created if needed); returns the paths written.
pub fn install(scope: Scope, dir: &Path, bin: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, text) in render(scope, bin) {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

/// The commands that finish the installation, for people.
pub fn next_steps(scope: Scope) -> String {
    match scope {
        Scope::System => "\
next, as root:
  getent group recalld >/dev/null || groupadd --system recalld
  getent passwd recalld >/dev/null || useradd --system --gid recalld --home-dir /var/lib/recalld --shell /usr/sbin/nologin recalld
  mkdir -p /etc/recalld && touch /etc/recalld/recalld.toml
  systemctl daemon-reload && systemctl enable --now recalld.socket
then add each agent's user to the recalld group (usermod -aG recalld AGENT); every uid gets its own memories"
            .into(),
        Scope::User => "\
next:
  systemctl --user daemon-reload && systemctl --user enable --now recalld.socket
the socket is $XDG_RUNTIME_DIR/recalld/recalld.sock, the daemon's default path"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_start_names_the_given_binary_and_the_units_are_notify_and_hardened() {
        for scope in [Scope::System, Scope::User] {
            let units = render(scope, Path::new("/opt/r/bin/recalld"));
            let service = &units.iter().find(|(n, _)| *n == "recalld.service").unwrap().1;
            assert!(service.contains("\nExecStart=/opt/r/bin/recalld serve"), "{service}");
            assert!(!service.contains(SHIPPED_BIN), "{service}");
            assert!(service.contains("\nType=notify\n"));
            assert!(service.contains("\nNoNewPrivileges=yes\n"));
            assert!(service.contains("\nPrivateTmp=yes\n"));
        }
        let system = render(Scope::System, Path::new("/usr/bin/recalld"));
        assert!(system[0].1.contains("\nProtectSystem=strict\n"));
        assert!(system[1].1.contains("\nSocketMode=0660\n"));
    }
}
