//! Which slots are free.
//!
//! Slots at or above `fresh` have never been handed out in this run (and
//! lie in no region file found at open), so they are free without being
//! listed; below it, a slot is in use, listed in `free`, or not scanned by
//! recovery yet (neither: it may hold a page of the previous run, so it is
//! not handed out until recovery has read its header).

use std::collections::BTreeSet;

/// The free slots of a tier of `limit` slots.
#[derive(Debug)]
pub(crate) struct SlotAllocator {
    limit: u32,
    fresh: u32,
    free: BTreeSet<u32>,
}

impl SlotAllocator {
    /// `limit` slots, of which `0..scan_end` lie in region files found at
    /// open and are not free until recovery says so ([`Self::release`]).
    pub fn new(limit: u32, scan_end: u32) -> Self {
        SlotAllocator {
            limit,
            fresh: scan_end.min(limit),
            free: BTreeSet::new(),
        }
    }

    /// A free slot: `prefer` when it is free (the slot after the previous
    /// page of the same object, so the two are read with one request), else
    /// the lowest free one (keeping region files few and dense).
    pub fn take(&mut self, prefer: Option<u32>) -> Option<u32> {
        if let Some(p) = prefer.filter(|&p| p < self.limit) {
            if self.free.remove(&p) {
                return Some(p);
            }
            if p == self.fresh {
                self.fresh += 1;
                return Some(p);
            }
        }
        if let Some(s) = self.free.pop_first() {
            return Some(s);
        }
        (self.fresh < self.limit).then(|| {
            self.fresh += 1;
            self.fresh - 1
        })
    }

    /// `slot` is free again (or, from recovery, found free).
    pub fn release(&mut self, slot: u32) {
        if slot < self.fresh {
            self.free.insert(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_then_lowest_then_fresh() {
        let mut a = SlotAllocator::new(10, 4);
        assert_eq!(a.take(None), Some(4), "0..4 are not scanned yet");
        assert_eq!(a.take(Some(2)), Some(5), "an unscanned slot is never handed out");
        a.release(1);
        a.release(2);
        assert_eq!(a.take(Some(2)), Some(2));
        assert_eq!(a.take(Some(6)), Some(6));
        assert_eq!(a.take(Some(9)), Some(1));
        for s in 7..10 {
            assert_eq!(a.take(None), Some(s));
        }
        assert_eq!(a.take(None), None);
        a.release(8);
        assert_eq!(a.take(Some(3)), Some(8));
    }
}
