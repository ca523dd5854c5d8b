//! The benchmark's daemon does not outlive the benchmark.

use crate::common;

use std::time::{Duration, Instant};

use recalld_bench::daemon::Daemon;

#[test]
fn a_daemon_whose_benchmark_went_away_without_stopping_it_stops() {
    // A benchmark killed mid-run never drops its daemon: here the thread that started it
    // ends without dropping it.
    let (pid, dir) = std::thread::spawn(|| {
        let d = Daemon::start(&common::recalld_bin(), &[]).expect("daemon starts");
        let seen = (d.pid() as libc::pid_t, d.data_dir().parent().unwrap().to_owned());
        std::mem::forget(d);
        seen
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a valid pointer to `status`.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if Instant::now() > deadline {
            // SAFETY: kill and waitpid on our own child; the test fails either way.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            let _ = std::fs::remove_dir_all(&dir);
            panic!("daemon {pid} was still running a minute after its benchmark's thread ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(dir);
    assert!(libc::WIFEXITED(status), "it shut down on SIGTERM: status {status}");
}
