//! The memories' index handles kept open, a bounded number at once: a daemon serving a thousand
//! memories must not hold a thousand indexes in RAM. The least recently used handle nobody is
//! using (and that may be closed: nothing unsaved in it) is closed first; it is opened again
//! from disk when next used.

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
}

impl<H> OpenHandles<H> {
    pub(super) fn new(max: usize) -> OpenHandles<H> {
        OpenHandles {
            max: max.max(1),
            inner: Mutex::new(Inner {
                handles: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner<H>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The memory's handle, opened by `open` when it is not open; then, while more than the
    /// maximum are open, closes the least recently used ones nobody holds and `closable` allows.
    pub(super) fn get(
        &self,
        memory: &str,
        open: impl FnOnce() -> Result<H, IndexError>,
        closable: impl Fn(&H) -> bool,
    ) -> Result<Arc<Mutex<H>>, IndexError> {
        let mut inner = self.inner();
        inner.order.retain(|m| m != memory);
        inner.order.push_back(memory.to_owned());
        if let Some(h) = inner.handles.get(memory) {
            return Ok(h.clone());
        }
        let h = Arc::new(Mutex::new(open()?));
        inner.handles.insert(memory.to_owned(), h.clone());
        let mut i = 0;
        while inner.handles.len() > self.max && i < inner.order.len() {
            let m = inner.order[i].clone();
            // New holders take their clone under this lock, so a count of one stays one.
            let idle = m != memory
                && inner
                    .handles
                    .get(&m)
                    .is_some_and(|h| Arc::strong_count(h) == 1 && h.try_lock().is_ok_and(|h| closable(&h)));
            if idle {
                inner.handles.remove(&m);
                inner.order.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(h)
    }

    /// The memory's handle if it is open (neither opened nor counted as a use).
    pub(super) fn peek(&self, memory: &str) -> Option<Arc<Mutex<H>>> {
        self.inner().handles.get(memory).cloned()
    }

    /// Puts `h` in place of the memory's handle (a rebuilt index).
    pub(super) fn replace(&self, memory: &str, h: H) {
        let mut inner = self.inner();
        inner.order.retain(|m| m != memory);
        inner.order.push_back(memory.to_owned());
        inner.handles.insert(memory.to_owned(), Arc::new(Mutex::new(h)));
    }

    /// Takes the memory's handle out (its index is being deleted).
    pub(super) fn remove(&self, memory: &str) -> Option<Arc<Mutex<H>>> {
        let mut inner = self.inner();
        inner.order.retain(|m| m != memory);
        inner.handles.remove(memory)
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
