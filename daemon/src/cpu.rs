//! How recalld's threads ask the CPU scheduler for their share: the request path, which a
//! caller waits on, asks for short time slices; background work runs at a lower priority.
//!
//! Linux's scheduler (EEVDF, since 6.6) lets a running thread use up its slice before a thread
//! that just woke takes the core, so a request thread woken beside a lane's model pass (nice
//! 10, but on two cores always running) could wait out the lane's slice. Since 6.12 a thread
//! may ask for a shorter slice (`sched_setattr`'s `sched_runtime`), and a thread with the
//! shorter slice takes the core when it wakes. Where the kernel does not know the request, or
//! forbids it, nothing changes.

/// The slice the request path's threads ask for (the kernel's default is 0.75 ms times
/// 1 + log2 of the cores; 0.1 ms is the least it grants).
const REQUEST_SLICE_NANOS: u64 = 100_000;

/// `struct sched_attr` as `sched_setattr` reads it (its first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks short slices for the calling thread (a thread of the request path), keeping its policy
/// and nice value. Says whether the kernel granted them.
pub fn request_path_thread() -> bool {
    // SAFETY: sched_getscheduler and getpriority take no pointers; sched_setattr reads `attr`,
    // a live value of the layout the kernel expects, and its size is given.
    unsafe {
        if libc::sched_getscheduler(0) != libc::SCHED_OTHER {
            return false; // an administrator's choice (batch, idle, real time) is kept
        }
        // (-1 is also what an error reads as: then the call below asks for nice -1, is refused,
        // and nothing changes.)
        let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: REQUEST_SLICE_NANOS,
            deadline: 0,
            period: 0,
        };
        let granted = libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0;
        if !granted {
            tracing::debug!("the kernel keeps its own time slice for the request path's threads");
        }
        granted
    }
}

/// Builds rayon's global pool, before anything starts it, with threads of the request path:
/// recall's query embedding runs its matrix products there (the lanes have pools of their own,
/// at nice 10). A forward pass wakes these threads dozens of times (each product is split over
/// them); with the default slice each wake could wait out a lane thread's slice on a busy core.
/// False when the pool was built already (then it stays as it is).
pub fn request_path_model_pool() -> bool {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|k| format!("recalld-model-{k}"))
        .start_handler(|_| {
            request_path_thread();
        })
        .build_global()
        .is_ok()
}

/// Lowers the calling thread's CPU priority (Linux: a thread id is a process id to setpriority).
pub fn background_thread() {
    // SAFETY: gettid and setpriority take no pointers; a failure only leaves the priority as is.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    if r != 0 {
        tracing::debug!("cannot lower a lane thread's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's slice as the scheduler reports it, where it does (`se.slice`).
    fn slice() -> Option<u64> {
        let sched = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    fn nice() -> i32 {
        // SAFETY: no pointers.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn a_request_thread_gets_short_slices_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            background_thread();
            assert_eq!(nice(), 10);
            if request_path_thread() {
                assert_eq!(nice(), 10, "the nice value an administrator gave stays");
                if let Some(s) = slice() {
                    assert_eq!(s, REQUEST_SLICE_NANOS);
                }
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_global_pools_threads_are_request_path_threads() {
        // Only when this test built the pool (another test's model may have started it first).
        if !request_path_model_pool() {
            return;
        }
        let granted = std::thread::spawn(request_path_thread).join().unwrap();
        let own = nice();
        let threads = rayon::broadcast(|_| (std::thread::current().name().map(str::to_owned), nice(), slice()));
        for (name, nice, slice) in threads {
            assert!(name.is_some_and(|n| n.starts_with("recalld-model-")));
            assert_eq!(nice, own, "not lowered like the lanes' pools");
            if let (true, Some(s)) = (granted, slice) {
                assert_eq!(s, REQUEST_SLICE_NANOS);
            }
        }
    }

    #[test]
    fn a_thread_of_another_policy_is_left_as_it_is() {
        std::thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a live sched_param.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
                return; // not allowed here: nothing to check
            }
            let before = slice();
            assert!(!request_path_thread());
            // SAFETY: no pointers.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
            assert_eq!(slice(), before);
        })
        .join()
        .unwrap();
    }
}
