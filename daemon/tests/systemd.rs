//! The daemon started the way systemd starts it: the listening socket on fd 3 with LISTEN_FDS
//! and LISTEN_PID, and NOTIFY_SOCKET a datagram socket that must hear READY=1 once it serves
//! and STOPPING=1 when SIGTERM makes it drain. Also `recalld install-units`.

use crate::util;

use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use recalld::client::Client;
use serde_json::json;
use util::{bin, model_dir};

fn next_state(notify: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn socket_activated_on_fd_3_it_serves_and_notifies_ready_then_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("activated.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(60))).unwrap();

    let fd = listener.as_raw_fd();
    let mut cmd = Command::new("/bin/sh");
    // LISTEN_PID must be the daemon's own pid: the shell exports its pid, then becomes it.
    cmd.arg("-c")
        .arg(r#"export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=recalld.socket; exec "$0" serve --data "$1" --socket "$2""#)
        .arg(bin())
        .arg(dir.path().join("data"))
        .arg(dir.path().join("not-this-one.sock"))
        .env_remove("RECALLD_CONFIG")
        .env("NOTIFY_SOCKET", &notify_path)
        .env("RECALLD_LOG", "warn")
        .env("RECALLD_MODEL_DIR", model_dir())
        .stdout(Stdio::null());
    // SAFETY: only dup2/fcntl between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                if libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(listener);

    assert_eq!(next_state(&notify), "READY=1");
    // It serves on the socket it was handed, and did not bind the configured path.
    let mut c = Client::connect(&socket).unwrap();
    assert_eq!(c.call("health", json!({})).unwrap()["status"], "ok");
    let request = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]});
    c.call("decorate", json!({"memory": "m", "request": request, "now": 1000.0}))
        .unwrap();
    assert!(!dir.path().join("not-this-one.sock").exists());

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(next_state(&notify), "STOPPING=1");
    drop(c);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        socket.exists(),
        "the socket belongs to systemd: the daemon leaves it in place"
    );
}

#[test]
fn install_units_writes_both_variants_naming_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, sub) in [(None, "system"), (Some("--user"), "user")] {
        let target = dir.path().join(sub);
        let mut cmd = Command::new(bin());
        cmd.arg("install-units")
            .arg("--dir")
            .arg(&target)
            .arg("--bin")
            .arg(bin());
        if let Some(f) = flag {
            cmd.arg(f);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("enable --now recalld.socket"), "{stdout}");
        let service = std::fs::read_to_string(target.join("recalld.service")).unwrap();
        let socket = std::fs::read_to_string(target.join("recalld.socket")).unwrap();
        assert!(
            service.contains(&format!("ExecStart={} serve", bin().display())),
            "{service}"
        );
        assert!(service.contains("Type=notify") && service.contains("NoNewPrivileges=yes"));
        assert!(socket.contains("ListenStream="));
        // When systemd's own checker is here, the files must pass it.
        if let Ok(out) = Command::new("systemd-analyze")
            .arg("verify")
            .arg("--man=no")
            .arg(target.join("recalld.socket"))
            .arg(target.join("recalld.service"))
            .output()
        {
            let text = String::from_utf8_lossy(&out.stderr);
            let bad: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("recalld.s") && !l.contains("Failed to resolve") && !l.contains("offline"))
                .collect();
            assert!(bad.is_empty(), "systemd-analyze verify ({sub}):\n{text}");
        }
    }
}
