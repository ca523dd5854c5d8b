//! The memories' index handles kept open, a bounded number at once: a daemon serving a thousand
//! memories must not hold a thousand indexes in RAM. The least recently used handle nobody is
//! using (and that may be closed: nothing unsaved in it) is closed first; it is opened again
//! from disk when next used.
//!
//! Opening is slow (a vector view reads every key: ~23 ms at 200k vectors), so it runs outside
//! the one lock every memory's lookup takes, behind a gate of its memory's own: the memory's
//! other callers wait for it, other memories do not. Replacing and removing a memory's handle
//! pass the same gate, so an open in flight never puts back a handle that was just replaced or
//! removed (and deleted from disk).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::IndexError;

pub(super) struct OpenHandles<H> {
    max: usize,
    inner: Mutex<Inner<H>>,
}

struct Inner<H> {
    handles: HashMap<String, Arc<Mutex<H>>>,
    /// Least recently used first.
    order: VecDeque<String>,
    /// Memories whose handle is being opened, replaced or removed, each with its gate (taken
    /// and dropped under `inner`'s lock, so a count says who waits).
    gates: HashMap<String, Arc<Mutex<()>>>,
}

impl<H> Inner<H> {
    fn touch(&mut self, memory: &str) {
        if self.order.back().is_some_and(|m| m == memory) {
            return;
        }
        self.order.retain(|m| m != memory);
        self.order.push_back(memory.to_owned());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<H> OpenHandles<H> {
    pub(super) fn new(max: usize) -> OpenHandles<H> {
        OpenHandles {
            max: max.max(1),
            inner: Mutex::new(Inner {
                handles: HashMap::new(),
                order: VecDeque::new(),
                gates: HashMap::new(),
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner<H>> {
        lock(&self.inner)
    }

    /// Runs `f` holding the memory's gate (not the lock every memory shares).
    fn gated<T>(&self, memory: &str, f: impl FnOnce() -> T) -> T {
        let gate = self.inner().gates.entry(memory.to_owned()).or_default().clone();
        let out = {
            let _passing = lock(&gate);
            f()
        };
        let mut inner = self.inner();
        // Only the map's count and ours: nobody else waits at this gate, and nobody can take
        // it meanwhile (that takes `inner`'s lock). Ours goes under the lock too, so the last
        // caller to leave sees a count of two.
        if Arc::strong_count(&gate) == 2 {
            inner.gates.remove(memory);
        }
        drop(gate);
        drop(inner);
        out
    }

    /// The memory's handle, opened by `open` when it is not open; then, while more than the
    /// maximum are open, closes the least recently used ones nobody holds and `closable` allows.
    pub(super) fn get(
        &self,
        memory: &str,
        open: impl FnOnce() -> Result<H, IndexError>,
        closable: impl Fn(&H) -> bool,
    ) -> Result<Arc<Mutex<H>>, IndexError> {
        {
            let mut inner = self.inner();
            inner.touch(memory);
            if let Some(h) = inner.handles.get(memory) {
                return Ok(h.clone());
            }
        }
        self.gated(memory, || {
            if let Some(h) = self.inner().handles.get(memory) {
                return Ok(h.clone()); // opened while this call waited at the gate
            }
            let opened = open();
            let mut inner = self.inner();
            let h = match opened {
                Ok(h) => Arc::new(Mutex::new(h)),
                Err(e) => {
                    inner.order.retain(|m| m != memory); // not open: no use to keep
                    return Err(e);
                }
            };
            inner.handles.insert(memory.to_owned(), h.clone());
            inner.touch(memory);
            self.close_idle(&mut inner, memory, closable);
            Ok(h)
        })
    }

    /// While more than the maximum are open, closes the least recently used handles other than
    /// `memory`'s that nobody holds and `closable` allows.
    fn close_idle(&self, inner: &mut Inner<H>, memory: &str, closable: impl Fn(&H) -> bool) {
        let mut i = 0;
        while inner.handles.len() > self.max && i < inner.order.len() {
            let m = &inner.order[i];
            let gated = inner.gates.contains_key(m);
            // Holders take their clone under this lock, so a count of one stays one; a memory
            // whose gate is held is being opened, replaced or removed by its holder.
            let idle = m != memory
                && !gated
                && inner
                    .handles
                    .get(m)
                    .is_some_and(|h| Arc::strong_count(h) == 1 && h.try_lock().is_ok_and(|h| closable(&h)));
            if idle {
                let m = inner.order.remove(i).expect("i < len");
                inner.handles.remove(&m);
            } else {
                i += 1;
            }
        }
    }

    /// The memory's handle if it is open (neither opened nor counted as a use).
    pub(super) fn peek(&self, memory: &str) -> Option<Arc<Mutex<H>>> {
        self.inner().handles.get(memory).cloned()
    }

    /// Puts `h` in place of the memory's handle (a rebuilt index), after any open of it in
    /// flight.
    pub(super) fn replace(&self, memory: &str, h: H) {
        self.gated(memory, || {
            let mut inner = self.inner();
            inner.touch(memory);
            inner.handles.insert(memory.to_owned(), Arc::new(Mutex::new(h)));
        })
    }

    /// Takes the memory's handle out (its index is being deleted) and runs `then` with it
    /// before any other call may open the memory's index again: `then` deletes its files.
    pub(super) fn remove<T>(&self, memory: &str, then: impl FnOnce(Option<Arc<Mutex<H>>>) -> T) -> T {
        self.gated(memory, || {
            let h = {
                let mut inner = self.inner();
                inner.order.retain(|m| m != memory);
                inner.handles.remove(memory)
            };
            then(h)
        })
    }

    /// Every open handle, with its memory.
    pub(super) fn all(&self) -> Vec<(String, Arc<Mutex<H>>)> {
        self.inner()
            .handles
            .iter()
            .map(|(m, h)| (m.clone(), h.clone()))
            .collect()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner().handles.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::thread;

    /// Starts `get(memory)` on its own thread with an open that waits for the returned sender;
    /// returns once that open is running.
    fn opening(
        handles: &Arc<OpenHandles<u32>>,
        memory: &'static str,
        value: u32,
    ) -> (mpsc::Sender<()>, thread::JoinHandle<Arc<Mutex<u32>>>) {
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let h = handles.clone();
        let t = thread::spawn(move || {
            h.get(
                memory,
                || {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    Ok(value)
                },
                |_| true,
            )
            .unwrap()
        });
        started.recv().unwrap();
        (release, t)
    }

    #[test]
    fn a_slow_open_holds_up_only_its_own_memory() {
        let handles = Arc::new(OpenHandles::new(8));
        let (release, a) = opening(&handles, "a", 1);
        // While "a" opens, "b" opens and is found, and "a" is not half there.
        let b = handles.get("b", || Ok(2), |_| true).unwrap();
        assert_eq!(*b.lock().unwrap(), 2);
        assert!(handles.peek("a").is_none());
        release.send(()).unwrap();
        assert_eq!(*a.join().unwrap().lock().unwrap(), 1);
        assert_eq!(handles.len(), 2);
    }

    #[test]
    fn callers_of_one_memory_share_its_one_open() {
        let handles = Arc::new(OpenHandles::new(8));
        let (release, first) = opening(&handles, "a", 1);
        let opens = Arc::new(AtomicUsize::new(0));
        let (h, n) = (handles.clone(), opens.clone());
        let second = thread::spawn(move || {
            h.get(
                "a",
                || {
                    n.fetch_add(1, Ordering::SeqCst);
                    Ok(2)
                },
                |_| true,
            )
            .unwrap()
        });
        thread::sleep(std::time::Duration::from_millis(20));
        release.send(()).unwrap();
        let (first, second) = (first.join().unwrap(), second.join().unwrap());
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(
            opens.load(Ordering::SeqCst),
            0,
            "the second caller waited for the first open"
        );
        assert!(handles.inner().gates.is_empty(), "gates go when nobody waits at them");
    }

    #[test]
    fn a_removal_during_an_open_comes_after_it() {
        let handles = Arc::new(OpenHandles::new(8));
        let (release, opener) = opening(&handles, "a", 1);
        let h = handles.clone();
        let remover = thread::spawn(move || h.remove("a", |h| h.map(|h| *h.lock().unwrap())));
        thread::sleep(std::time::Duration::from_millis(20));
        release.send(()).unwrap();
        opener.join().unwrap();
        // The removal took the handle the open put in: none is left to outlive deleted files.
        assert_eq!(remover.join().unwrap(), Some(1));
        assert!(handles.peek("a").is_none());
        assert_eq!(handles.len(), 0);
    }

    #[test]
    fn past_the_maximum_the_least_recently_used_idle_handle_closes() {
        let handles = OpenHandles::new(2);
        let a = handles.get("a", || Ok(1), |_| true).unwrap();
        drop(handles.get("b", || Ok(2), |_| true).unwrap());
        drop(handles.get("c", || Ok(3), |_| true).unwrap());
        // "a" is held, so "b" (the least recently used idle one) closed.
        assert!(handles.peek("a").is_some() && handles.peek("b").is_none() && handles.peek("c").is_some());
        drop(a);
        assert!(handles
            .get("d", || Err(IndexError::Words("no".into())), |_| true)
            .is_err());
        drop(handles.get("e", || Ok(5), |_| true).unwrap());
        assert_eq!(handles.len(), 2);
        assert!(
            handles.inner().order.iter().all(|m| m != "d"),
            "a failed open leaves no use behind"
        );
    }
}
