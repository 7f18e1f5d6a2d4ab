//! What a shared-dictionary segment remembers of the predicates scans ran
//! on it ([`crate::shared_dict`]): each recent predicate's result per entry
//! and, for a block-compressed (zstd) segment, the entries it matched and
//! the entries scans took from it, decoded.
//!
//! Why the matched entries: a scan filtering on a column takes the rows its
//! filter kept from that same column (DataFusion re-checks the filter above
//! the scan), so its takes are of entries the predicate matched. From a zstd
//! segment every such take would decompress whole blocks of values for a
//! few rows, query after query; with the matched entries kept decoded, it
//! decompresses nothing. A filter on several columns keeps rows that no
//! predicate on the taken column matched (ClickBench q22 takes `URL` of the
//! rows `Title LIKE '%Google%'` kept): the entries such takes read are
//! remembered too, so the query's next run finds them. They are kept only
//! while few (each set at most one entry in [`MATCHED_FRACTION`], all of a
//! segment's at most [`MATCHED_BYTES`]), and like the results they are not
//! charged to the memory tier: bounded per segment, dropped with it.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::take;

use crate::LiquidPredicate;
use crate::shared_dict::compact_views;

/// Predicate results each segment remembers.
pub const MEMO: usize = 8;

/// A predicate's matched entries are kept decoded only when at most one in
/// this many of the segment's entries matched.
pub const MATCHED_FRACTION: usize = 8;

/// Most bytes of decoded matched entries one segment keeps (all its
/// remembered predicates together).
pub const MATCHED_BYTES: usize = 64 << 10;

/// A segment's recent predicates, newest last.
#[derive(Debug, Default)]
pub struct SegmentMemo {
    entries: Vec<Remembered>,
    /// Entries scans took that no remembered predicate matched.
    taken: Option<Matched>,
}

/// One predicate's result per entry, and maybe its matched entries decoded.
#[derive(Debug)]
struct Remembered {
    predicate: LiquidPredicate,
    result: Arc<BooleanArray>,
    matched: Option<Matched>,
}

/// Entries a predicate matched: their ids in the segment, ascending, and
/// their values decoded in that order.
#[derive(Debug)]
pub struct Matched {
    ids: Vec<u32>,
    values: ArrayRef,
}

impl Matched {
    /// The entries `result` matched (true and valid), decoded by `decode`
    /// (given their ids), if they are few enough to keep: `None` otherwise.
    pub fn of(result: &BooleanArray, decode: impl FnOnce(&UInt32Array) -> ArrayRef) -> Option<Self> {
        let ids = crate::selection_to_indices(result);
        if ids.is_empty() || ids.len() * MATCHED_FRACTION > result.len() {
            return None;
        }
        let values = decode(&ids);
        let matched = Matched {
            ids: ids.values().to_vec(),
            values,
        };
        (matched.bytes() <= MATCHED_BYTES).then_some(matched)
    }

    fn bytes(&self) -> usize {
        self.values.get_array_memory_size() + self.ids.capacity() * 4
    }

    /// These entries and `other`'s (disjoint from them), in id order.
    fn union(&self, other: &Matched) -> Matched {
        let (mut ids, mut from) = (Vec::with_capacity(self.ids.len() + other.ids.len()), Vec::new());
        let (mut a, mut b) = (0, 0);
        while a < self.ids.len() || b < other.ids.len() {
            if b == other.ids.len() || (a < self.ids.len() && self.ids[a] < other.ids[b]) {
                ids.push(self.ids[a]);
                from.push((0, a));
                a += 1;
            } else {
                ids.push(other.ids[b]);
                from.push((1, b));
                b += 1;
            }
        }
        let values = arrow::compute::interleave(&[self.values.as_ref(), other.values.as_ref()], &from)
            .expect("entries of one segment share a type");
        Matched {
            ids,
            values: compact_views(values),
        }
    }

    /// The values at `local` (ids in the segment, no nulls), if every one
    /// is among the matched entries.
    fn take(&self, local: &UInt32Array) -> Option<ArrayRef> {
        let positions: Option<Vec<u32>> = local
            .values()
            .iter()
            .map(|id| self.ids.binary_search(id).ok().map(|p| p as u32))
            .collect();
        let positions = UInt32Array::from(positions?);
        let rows = take(self.values.as_ref(), &positions, None).expect("positions index the matched entries");
        // The output batch carries only its own rows' bytes, not the memo's.
        Some(compact_views(rows))
    }
}

impl SegmentMemo {
    /// `predicate`'s result, if remembered.
    pub fn get(&self, predicate: &LiquidPredicate) -> Option<Arc<BooleanArray>> {
        self.entries
            .iter()
            .find(|e| &e.predicate == predicate)
            .map(|e| Arc::clone(&e.result))
    }

    /// Remembers `predicate`'s `result` (and its `matched` entries while
    /// they fit in [`MATCHED_BYTES`] with the others kept), forgetting the
    /// oldest beyond [`MEMO`].
    pub fn insert(&mut self, predicate: LiquidPredicate, result: Arc<BooleanArray>, matched: Option<Matched>) {
        if self.entries.len() >= MEMO {
            self.entries.remove(0);
        }
        let matched = matched.filter(|m| self.kept_bytes() + m.bytes() <= MATCHED_BYTES);
        self.entries.push(Remembered {
            predicate,
            result,
            matched,
        });
    }

    /// Bytes of the decoded entries kept.
    fn kept_bytes(&self) -> usize {
        let matched = self.entries.iter().filter_map(|e| e.matched.as_ref());
        matched.chain(&self.taken).map(Matched::bytes).sum()
    }

    /// The values at `local` (ids in the segment, no nulls) from the entries
    /// some remembered predicate matched or scans took, if one set holds
    /// them all.
    pub fn take_matched(&self, local: &UInt32Array) -> Option<ArrayRef> {
        if local.null_count() > 0 {
            return None;
        }
        let matched = self.entries.iter().rev().filter_map(|e| e.matched.as_ref());
        matched.chain(&self.taken).find_map(|m| m.take(local))
    }

    /// A scan took `values` at `local` (ids in the segment of `entries`
    /// entries, ascending and distinct), found in no set kept: they join
    /// the taken entries while those stay few (module documentation).
    pub fn remember_taken(&mut self, local: &UInt32Array, values: &ArrayRef, entries: usize) {
        if local.len() * MATCHED_FRACTION > entries {
            return; // the union could not stay within the fraction either
        }
        let known = |id: &u32| self.taken.as_ref().is_some_and(|t| t.ids.binary_search(id).is_ok());
        let fresh: Vec<u32> = (0..local.len() as u32)
            .filter(|&p| !known(&local.value(p as usize)))
            .collect();
        if fresh.is_empty() {
            return;
        }
        let (fresh_ids, fresh_values) = match fresh.len() == local.len() {
            true => (local.values().to_vec(), compact_views(values.clone())),
            false => {
                let positions = UInt32Array::from(fresh.clone());
                let values = take(values.as_ref(), &positions, None).expect("positions index the taken values");
                (
                    fresh.iter().map(|&p| local.value(p as usize)).collect(),
                    compact_views(values),
                )
            }
        };
        let fresh = Matched {
            ids: fresh_ids,
            values: fresh_values,
        };
        let before = self.taken.as_ref().map_or(0, Matched::bytes);
        let union = match &self.taken {
            Some(taken) => taken.union(&fresh),
            None => fresh,
        };
        if union.ids.len() * MATCHED_FRACTION <= entries && self.kept_bytes() - before + union.bytes() <= MATCHED_BYTES
        {
            self.taken = Some(union);
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, StringArray};

    use super::*;

    fn values(n: usize) -> ArrayRef {
        Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("value-{i}"))))
    }

    #[test]
    fn takes_within_the_matched_entries_come_from_the_memo_and_others_do_not() {
        let all = values(100);
        let result = BooleanArray::from_iter((0..100).map(|i| Some(i % 20 == 3)));
        let matched = Matched::of(&result, |ids| take(all.as_ref(), ids, None).unwrap()).expect("5 of 100 kept");
        let mut memo = SegmentMemo::default();
        let predicate = like("%3");
        memo.insert(predicate.clone(), Arc::new(result.clone()), Some(matched));
        assert!(memo.get(&predicate).is_some());
        let got = memo
            .take_matched(&UInt32Array::from(vec![23, 3, 23, 83]))
            .expect("all matched");
        let got: Vec<&str> = got.as_string::<i32>().iter().map(Option::unwrap).collect();
        assert_eq!(got, ["value-23", "value-3", "value-23", "value-83"]);
        // One id the predicate did not match: not served from the memo.
        assert!(memo.take_matched(&UInt32Array::from(vec![3, 4])).is_none());
        assert!(memo.take_matched(&UInt32Array::from(vec![Some(3), None])).is_none());
        // Too many matched (over one in eight): nothing kept.
        let many = BooleanArray::from_iter((0..100).map(|i| Some(i % 4 == 0)));
        assert!(Matched::of(&many, |ids| take(all.as_ref(), ids, None).unwrap()).is_none());
        // The memo forgets its oldest beyond MEMO, matched entries with them.
        for k in 0..MEMO {
            memo.insert(like(&format!("%{k}%")), Arc::new(result.clone()), None);
        }
        assert!(memo.get(&predicate).is_none());
        assert!(memo.take_matched(&UInt32Array::from(vec![3])).is_none());
        // Entries scans took are served again, whichever takes brought them.
        let taken = |ids: Vec<u32>| {
            let ids = UInt32Array::from(ids);
            (ids.clone(), take(all.as_ref(), &ids, None).unwrap())
        };
        let (ids, got) = taken(vec![5, 9]);
        memo.remember_taken(&ids, &got, 100);
        let (ids, got) = taken(vec![2, 9, 11]);
        memo.remember_taken(&ids, &got, 100);
        let got = memo
            .take_matched(&UInt32Array::from(vec![2, 5, 9, 11, 11]))
            .expect("all taken before");
        let got: Vec<&str> = got.as_string::<i32>().iter().map(Option::unwrap).collect();
        assert_eq!(got, ["value-2", "value-5", "value-9", "value-11", "value-11"]);
        assert!(memo.take_matched(&UInt32Array::from(vec![2, 3])).is_none());
        // Beyond one entry in eight, the taken set stops growing.
        let (ids, got) = taken((20..40).collect());
        memo.remember_taken(&ids, &got, 100);
        assert!(memo.take_matched(&UInt32Array::from(vec![20])).is_none());
        assert!(memo.take_matched(&UInt32Array::from(vec![5])).is_some());
    }

    fn like(pattern: &str) -> LiquidPredicate {
        LiquidPredicate::Like {
            pattern: pattern.into(),
            negated: false,
            case_insensitive: false,
        }
    }
}
