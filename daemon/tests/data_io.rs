//! Data in and out on the real daemon: forget_memory removes a memory and everything derived
//! from it (and only it), and a backup taken while serving restores to the same memories.

mod convo;
mod util;

use std::process::Command;

use convo::Convo;
use recalld::store::{Store, StoreOptions};
use serde_json::{json, Value};
use util::{bin, code, Daemon};

fn cli(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(bin()).args(args).env_remove("RECALLD_CONFIG").output().unwrap();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn len(v: &Value, key: &str) -> u64 {
    v[key].as_array().map(|a| a.len() as u64).unwrap_or(0)
}

#[test]
fn forget_removes_every_record_of_one_memory_and_backup_restore_round_trips() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let mut keep = Convo::new("keep");
    let mut gone = Convo::new("gone");
    for _ in 0..12 {
        keep.turn_trip(&mut c).unwrap();
        gone.turn_trip(&mut c).unwrap();
    }
    convo::drain(&mut c);
    let before_keep = c.call("export", json!({"memory": "keep"})).unwrap();
    let before = c.call("export", json!({"memory": "gone"})).unwrap();
    assert!(len(&before, "facts") >= 12, "{}", len(&before, "facts"));
    assert!(len(&before, "episodes") > 0, "the low ceiling cuts episodes");

    let socket = d.socket.to_str().unwrap().to_string();
    let (ok, receipt, err) = cli(&["forget", "gone", "--socket", &socket]);
    assert!(ok, "{err}");
    assert_eq!(receipt["memory"], "gone");
    let removed = &receipt["removed"];
    assert_eq!(removed["memories"], 1);
    assert_eq!(removed["messages"].as_u64(), Some(len(&before, "messages")));
    assert_eq!(removed["facts"].as_u64(), Some(len(&before, "facts")));
    assert_eq!(removed["episodes"].as_u64(), Some(len(&before, "episodes")));
    assert_eq!(removed["traces"].as_u64().unwrap_or(0), len(&before, "traces"));
    assert_eq!(code(c.call("export", json!({"memory": "gone"}))), "not_found");
    assert_eq!(code(c.call("forget_memory", json!({"memory": "gone"}))), "not_found");
    assert_eq!(c.call("export", json!({"memory": "keep"})).unwrap(), before_keep, "a neighbour untouched");

    // A backup while the daemon serves (and a client keeps writing).
    let backup = d.dir.path().join("backup-1");
    let data = d.data.to_str().unwrap().to_string();
    let (ok, info, err) = cli(&["backup", backup.to_str().unwrap(), "--data", &data]);
    assert!(ok, "{err}");
    assert_eq!(info["memories"], 1);
    keep.turn_trip(&mut c).unwrap();
    convo::drain(&mut c);
    let after_backup = c.call("export", json!({"memory": "keep"})).unwrap();
    drop(c);
    assert_eq!(d.stop(), Some(0));

    // Nothing of the forgotten memory is left in any table (whatever it is named inside).
    {
        let store = Store::open(&d.data, &StoreOptions::default()).unwrap();
        let left = store.read(|r| r.memory_entries(&format!("u{}/gone", unsafe { libc::geteuid() }))).unwrap();
        assert_eq!(left, 0);
        let kept = store.read(|r| r.memory_entries(&format!("u{}/keep", unsafe { libc::geteuid() }))).unwrap();
        assert!(kept > 0);
    }

    // Restore is refused while a daemon serves, then puts the backup in place.
    d.spawn(&[]);
    let (ok, _, err) = cli(&["restore", backup.to_str().unwrap(), "--data", &data, "--socket", &socket]);
    assert!(!ok && err.contains("stop it"), "{err}");
    assert_eq!(d.stop(), Some(0));
    let (ok, restored, err) = cli(&["restore", backup.to_str().unwrap(), "--data", &data, "--socket", &socket]);
    assert!(ok, "{err}");
    assert!(restored["replaced_file_kept_at"].is_string(), "the replaced file is kept");
    d.spawn(&[]);
    let mut c = d.client();
    assert_eq!(c.call("export", json!({"memory": "keep"})).unwrap(), before_keep);
    assert_ne!(before_keep, after_backup);
    assert_eq!(code(c.call("export", json!({"memory": "gone"}))), "not_found");
}
