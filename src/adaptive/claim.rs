//! Who may still write a map's slots. The fast mode moves a CPU's slot
//! between events it opened, which is right only while no one else has
//! taken the slot since. User space cannot read a `PERF_EVENT_ARRAY`
//! slot back (the kernel has no lookup for it), so each buffer takes a
//! claim on its map when it opens, and the fast mode writes a slot only
//! while its claim is the newest:
//! - a second buffer on the same map in this process (any mode) takes a
//!   newer claim, as libbpf's second buffer takes the slots;
//! - a forked child inherits the claim word (it lives in a `MAP_SHARED`
//!   page), so a child that opens a buffer on the map, or frees its copy
//!   of the parent's buffer (which deletes the slots), makes the parent's
//!   claim stale too.
//!
//! What it cannot see: another process that opened the map by itself (a
//! pinned map, a map fd sent over a socket) and the caller's own map
//! updates. README lists those as unsupported in the fast mode.

use crate::kernel::sys::{self, SharedWord};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// The claim words of the maps buffers were opened on, by map id.
static WORDS: Mutex<Vec<(u32, Weak<SharedWord>)>> = Mutex::new(Vec::new());

/// A buffer's claim on a map's slots.
#[derive(Clone)]
pub struct Claim {
    word: Arc<SharedWord>,
    mine: u64,
}

impl Claim {
    /// Takes the newest claim on map `map_id`; `None` if no shared page
    /// could be had (then nothing can be told about other buffers).
    pub fn take(map_id: u32) -> Option<Claim> {
        let mut words = WORDS.lock().unwrap_or_else(|e| e.into_inner());
        words.retain(|(_, w)| w.strong_count() > 0);
        let word = match words.iter().find(|(id, _)| *id == map_id).and_then(|(_, w)| w.upgrade()) {
            Some(word) => word,
            None => {
                let word = Arc::new(sys::shared_word().ok()?);
                words.try_reserve(1).ok()?;
                words.push((map_id, Arc::downgrade(&word)));
                word
            }
        };
        let mine = word.get().fetch_add(1, Ordering::AcqRel) + 1;
        Some(Claim { word, mine })
    }

    /// Whether no newer claim was taken since.
    pub fn held(&self) -> bool {
        self.word.get().load(Ordering::Acquire) == self.mine
    }

    /// Makes every claim on the map stale (a forked copy deleted the slots).
    pub fn void_all(&self) {
        self.word.get().fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_claim_holds() {
        let a = Claim::take(9_000_001).unwrap();
        assert!(a.held());
        let b = Claim::take(9_000_001).unwrap();
        assert!(!a.held() && b.held());
        let other = Claim::take(9_000_002).unwrap();
        assert!(b.held() && other.held(), "maps are independent");
        b.void_all();
        assert!(!b.held());
    }

    #[test]
    fn a_forked_child_can_void_the_parents_claim() {
        let claim = Claim::take(9_000_003).unwrap();
        // SAFETY: the child only touches the claim's shared word and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            claim.void_all();
            // SAFETY: leaves the child at once, running no destructors.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: `status` is a valid int to write.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(!claim.held(), "the child's write reached the parent");
    }
}
