//! Property tests: every liquid byte array operation equals the Arrow kernel
//! on the decoded array, for every supported type, through one encoder per
//! column of a file (shared FSST table and dictionary).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, DictionaryArray, Scalar, StringArray, UInt32Array, make_array,
};
use arrow::compute::kernels::cmp;
use arrow::compute::kernels::comparison::{ilike, like, nilike, nlike};
use arrow::compute::{and_kleene, cast, filter, is_not_null, is_null, not, or_kleene, take};
use arrow::datatypes::{DataType, Int32Type};
use proptest::prelude::*;
mod common;

use silt_liquid::bytes::{BytesEncoder, Compaction};
use silt_liquid::{CmpOp, ColumnEncoder, LiquidArray, LiquidPredicate};

const VALUE_TYPES: [DataType; 6] = [
    DataType::Utf8,
    DataType::LargeUtf8,
    DataType::Utf8View,
    DataType::Binary,
    DataType::LargeBinary,
    DataType::BinaryView,
];

const KEY_TYPES: [DataType; 4] = [DataType::Int8, DataType::UInt16, DataType::Int32, DataType::UInt64];

/// A tiny deterministic generator, seeded by proptest, for selections,
/// indices and literal choices (cheaper than nested strategies).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

type Batch = Vec<Option<String>>;

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c]{0,3}",
        3 => "(https?://)?(www\\.)?[a-e]{1,4}\\.(com|org)/[a-z0-9/]{0,12}",
        2 => "[aé😀\u{301}ß%_\\\\xK\u{212A}ſ]{0,10}",
        1 => Just(String::new()),
        1 => "[a-z]{1,6}".prop_map(|s| s.repeat(1100 / s.len() + 1)),
    ]
}

/// A batch: low cardinality (drawn from a small pool) or high (free strings),
/// with nulls, 0..3000 rows (crossing the 1024-value block boundary).
fn batch() -> impl Strategy<Value = Batch> {
    let len = prop_oneof![0usize..40, 1000usize..1100, 0usize..3000];
    let low = (prop::collection::vec(string(), 1..12), len.clone(), any::<u64>()).prop_map(|(pool, len, seed)| {
        let mut rng = Rng(seed);
        (0..len)
            .map(|_| (rng.below(8) != 0).then(|| pool[rng.below(pool.len())].clone()))
            .collect()
    });
    let high = prop::collection::vec(prop::option::weighted(0.9, string()), 0..1500);
    // One value (often "") in ~95% of the rows: the dominant form.
    let dominant = (prop::collection::vec(string(), 2..12), len.clone(), any::<u64>()).prop_map(|(pool, len, seed)| {
        let mut rng = Rng(seed);
        (0..len)
            .map(|_| match rng.below(40) {
                0 => None,
                1 => Some(pool[1 + rng.below(pool.len() - 1)].clone()),
                _ => Some(pool[0].clone()),
            })
            .collect()
    });
    // Runs of one value (nulls sprinkled inside them), as in a clustered
    // table: the shared dictionary keeps its keys as runs.
    let clustered = (prop::collection::vec(string(), 2..40), len, any::<u64>()).prop_map(|(pool, len, seed)| {
        let mut rng = Rng(seed);
        let run = 1 + rng.below(60);
        (0..len)
            .map(|i| (rng.below(9) != 0).then(|| pool[(i / run) % pool.len()].clone()))
            .collect()
    });
    prop_oneof![low, high, dominant, clustered]
}

fn value_array(batch: &[Option<String>], value_type: &DataType) -> ArrayRef {
    cast(&StringArray::from(batch.to_vec()), value_type).unwrap()
}

/// A dictionary with an unused entry and a null value (some null rows point
/// at it, others have null keys), or `None` when the key type is too small.
fn dict_array(batch: &[Option<String>], key: &DataType, value_type: &DataType) -> Option<ArrayRef> {
    let mut distinct: Vec<Option<String>> = Vec::new();
    let mut keys = Vec::new();
    for (i, row) in batch.iter().enumerate() {
        keys.push(match row {
            None if i % 2 == 0 => None,
            None => Some(u32::MAX),
            Some(s) => Some(match distinct.iter().position(|d| d.as_deref() == Some(s.as_str())) {
                Some(p) => p as u32,
                None => {
                    distinct.push(Some(s.clone()));
                    distinct.len() as u32 - 1
                }
            }),
        });
    }
    distinct.push(Some("unused entry".into()));
    distinct.push(None);
    let null_entry = distinct.len() as u32 - 1;
    let keys: UInt32Array = keys.into_iter().map(|k| k.map(|k| k.min(null_entry))).collect();
    let keys = cast(&keys, &DataType::Int32).ok()?;
    let keys = keys.as_any().downcast_ref::<arrow::array::Int32Array>()?.clone();
    let dict = DictionaryArray::<Int32Type>::try_new(keys, value_array(&distinct, value_type)).ok()?;
    let target = DataType::Dictionary(Box::new(key.clone()), Box::new(value_type.clone()));
    cast(&dict, &target).ok().filter(|a| a.data_type() == &target)
}

/// Every type under test for one value type: the value type and a dictionary of it.
fn inputs(batch: &[Option<String>], key: &DataType, value_type: &DataType) -> Vec<ArrayRef> {
    let mut out = vec![value_array(batch, value_type)];
    out.extend(dict_array(batch, key, value_type));
    out
}

/// Equal types and equal logical values. Dictionaries compare by value: a
/// null *value* in the input dictionary comes back as a null key, which
/// Arrow's physical equality would tell apart.
fn assert_same(got: &ArrayRef, expected: &ArrayRef, what: &str) {
    assert_eq!(got.data_type(), expected.data_type(), "{what}: type");
    if let DataType::Dictionary(_, vt) = expected.data_type() {
        let (got, expected) = (cast(got, vt).unwrap(), cast(expected, vt).unwrap());
        assert_eq!(&got, &expected, "{what}");
    } else {
        assert_eq!(got, expected, "{what}");
    }
}

fn check_round_trip(liquid: &dyn LiquidArray, input: &ArrayRef) {
    let out = liquid.to_arrow();
    assert_same(&out, input, &format!("round trip ({})", liquid.encoding()));
    assert_eq!(liquid.len(), input.len());
    assert_eq!(liquid.null_count(), input.logical_null_count());
    // Zero bytes only when nothing needs storing: no rows, a dictionary's
    // keys alone, or no nulls and every value empty (a batch of `""`: the
    // flat form's ends then pack to zero bits).
    let texts = cast(input, &DataType::Utf8).unwrap();
    let only_empty = input.null_count() == 0 && texts.as_string::<i32>().iter().flatten().all(str::is_empty);
    assert!(liquid.heap_size() > 0 || input.is_empty() || liquid.encoding() == "dict" || only_empty);
}

fn check_filter_take(liquid: &dyn LiquidArray, input: &ArrayRef, rng: &mut Rng) {
    let n = input.len();
    let density = rng.below(4);
    let selection: BooleanArray = (0..n)
        .map(|_| (rng.below(10) != 0).then(|| rng.below(4) < density))
        .collect();
    let expected = filter(input, &selection).unwrap();
    assert_same(
        &liquid.filter(&selection),
        &expected,
        &format!("filter ({})", liquid.encoding()),
    );
    let indices: UInt32Array = (0..rng.below(n + 5).min(n * 2))
        .map(|_| (rng.below(8) != 0).then(|| rng.below(n) as u32))
        .collect();
    let expected = take(input, &indices, None).unwrap();
    assert_same(
        &liquid.take(&indices),
        &expected,
        &format!("take ({})", liquid.encoding()),
    );
}

fn literal(value: Option<&str>, value_type: &DataType) -> ArrayRef {
    cast(&StringArray::from(vec![value]), value_type).unwrap()
}

/// Literals from the batch plus absent ones and a null.
fn literal_texts(batch: &[Option<String>], rng: &mut Rng) -> Vec<Option<String>> {
    let mut out = vec![None, Some(String::new()), Some("zz absent".into()), Some("b".into())];
    for _ in 0..3 {
        if let Some(Some(s)) = batch.get(rng.below(batch.len())) {
            out.push(Some(s.clone()));
            out.push(Some(format!("{s}\u{0}")));
        }
    }
    out
}

fn check_eq(got: Option<BooleanArray>, expected: BooleanArray, what: &str) {
    let got = got.unwrap_or_else(|| panic!("{what}: evaluate returned None"));
    assert_eq!(got, expected, "{what}");
}

fn check_compare(liquid: &dyn LiquidArray, decoded: &ArrayRef, lits: &[Option<String>], vt: &DataType) {
    for text in lits {
        let lit = literal(text.as_deref(), vt);
        for (op, kernel) in common::OPS {
            let expected = kernel(decoded, &Scalar::new(lit.clone())).unwrap();
            let got = liquid.evaluate(&LiquidPredicate::Compare {
                op,
                literal: lit.clone(),
            });
            check_eq(got, expected, &format!("{op:?} {text:?} ({})", liquid.encoding()));
        }
    }
    let (low, high) = (
        literal(lits[1].as_deref(), vt),
        literal(lits.last().unwrap().as_deref(), vt),
    );
    let expected = and_kleene(
        &cmp::gt_eq(decoded, &Scalar::new(low.clone())).unwrap(),
        &cmp::lt_eq(decoded, &Scalar::new(high.clone())).unwrap(),
    )
    .unwrap();
    check_eq(
        liquid.evaluate(&LiquidPredicate::Between { low, high }),
        expected,
        "between",
    );
}

fn check_in_list(liquid: &dyn LiquidArray, decoded: &ArrayRef, lits: &[Option<String>], vt: &DataType) {
    let list: Vec<&str> = lits.iter().flatten().map(String::as_str).skip(1).collect();
    for len in [0, 1, list.len()] {
        let values = cast(&StringArray::from(list[..len].to_vec()), vt).unwrap();
        let mut expected = BooleanArray::new(
            arrow::buffer::BooleanBuffer::new_unset(decoded.len()),
            decoded.logical_nulls(),
        );
        for v in &list[..len] {
            let eq = cmp::eq(decoded, &Scalar::new(literal(Some(v), vt))).unwrap();
            expected = or_kleene(&expected, &eq).unwrap();
        }
        for negated in [false, true] {
            let want = if negated {
                not(&expected).unwrap()
            } else {
                expected.clone()
            };
            let got = liquid.evaluate(&LiquidPredicate::InList {
                values: values.clone(),
                negated,
            });
            check_eq(got, want, &format!("in list {negated} {:?}", &list[..len]));
        }
    }
}

fn check_nulls(liquid: &dyn LiquidArray, decoded: &ArrayRef) {
    check_eq(
        liquid.evaluate(&LiquidPredicate::IsNull),
        is_null(decoded).unwrap(),
        "is null",
    );
    check_eq(
        liquid.evaluate(&LiquidPredicate::IsNotNull),
        is_not_null(decoded).unwrap(),
        "is not null",
    );
}

/// The shapes the encoding promises to evaluate (mirrors Arrow's fast paths).
fn supported_shape(pattern: &str) -> bool {
    let rest = pattern.strip_prefix('%').unwrap_or(pattern);
    let needle = rest.strip_suffix('%').unwrap_or(rest);
    !needle.contains(['%', '_', '\\'])
}

/// Patterns of the four shapes from substrings of batch values, plus unsupported ones.
fn patterns(batch: &[Option<String>], rng: &mut Rng) -> Vec<String> {
    let mut out = vec![
        "a_c".to_string(),
        "%a%b%".into(),
        "a\\%".into(),
        "%".into(),
        "zz%".into(),
    ];
    for _ in 0..3 {
        let Some(Some(s)) = batch.get(rng.below(batch.len())) else {
            continue;
        };
        let chars: Vec<char> = s.chars().filter(|c| !matches!(c, '%' | '_' | '\\')).collect();
        let a = rng.below(chars.len() + 1);
        let b = a + rng.below(chars.len() - a + 1).min(12);
        let sub: String = chars[a..b].iter().collect();
        let whole: String = chars.iter().collect();
        out.extend([
            whole,
            format!("{sub}%"),
            format!("%{sub}"),
            format!("%{sub}%"),
            sub.to_uppercase() + "%",
        ]);
    }
    out
}

/// `chunk_ascii`: every value the column chunk has seen so far is ASCII (a
/// chunk dictionary declines ILIKE once any of its values is not).
fn check_like(liquid: &dyn LiquidArray, decoded: &ArrayRef, pats: &[String], vt: &DataType, chunk_ascii: bool) {
    let utf8 = matches!(vt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    for p in pats {
        for (negated, ci) in [(false, false), (true, false), (false, true), (true, true)] {
            let pred = LiquidPredicate::Like {
                pattern: p.clone(),
                negated,
                case_insensitive: ci,
            };
            let got = liquid.evaluate(&pred);
            if !utf8 {
                assert!(got.is_none(), "LIKE on binary must decline");
                continue;
            }
            let Some(got) = got else {
                let ascii_data =
                    decoded_is_ascii(decoded) && (chunk_ascii || !liquid.encoding().starts_with("shared-dict"));
                assert!(
                    !supported_shape(p) || (ci && !(p.is_ascii() && ascii_data)),
                    "declined supported pattern {p:?} ci={ci}"
                );
                continue;
            };
            let pattern = Scalar::new(literal(Some(p), vt));
            let kernel = match (negated, ci) {
                (false, false) => like,
                (true, false) => nlike,
                (false, true) => ilike,
                (true, true) => nilike,
            };
            let expected = kernel(decoded, &pattern).unwrap();
            assert_eq!(
                got,
                expected,
                "like {p:?} negated={negated} ci={ci} ({})",
                liquid.encoding()
            );
        }
    }
}

fn decoded_is_ascii(decoded: &ArrayRef) -> bool {
    let strings = cast(decoded, &DataType::Utf8).unwrap();
    let strings = strings.as_any().downcast_ref::<StringArray>().unwrap();
    strings.iter().flatten().all(|s| s.is_ascii())
}

/// Checks every operation of `liquid` against Arrow on `input`.
fn check_array(
    liquid: &dyn LiquidArray,
    input: &ArrayRef,
    batch: &[Option<String>],
    vt: &DataType,
    chunk_ascii: bool,
    rng: &mut Rng,
) {
    check_round_trip(liquid, input);
    check_filter_take(liquid, input, rng);
    let decoded = cast(input, vt).unwrap();
    let lits = literal_texts(batch, rng);
    check_compare(liquid, &decoded, &lits, vt);
    check_in_list(liquid, &decoded, &lits, vt);
    check_nulls(liquid, &decoded);
    check_like(liquid, &decoded, &patterns(batch, rng), vt, chunk_ascii);
}

/// Encodes `batches` as one column chunk of each type and checks everything,
/// with the zstd block form where it is clearly smaller (the default) and
/// wherever it applies.
fn check_chunk(batches: &[Batch], key: &DataType, seed: u64) {
    for compaction in [Compaction::WhenSmaller, Compaction::Always] {
        check_chunk_as(batches, key, seed, compaction);
    }
}

fn check_chunk_as(batches: &[Batch], key: &DataType, seed: u64, compaction: Compaction) {
    for vt in &VALUE_TYPES {
        // One encoder per input type, as the transcoder keeps one per chunk:
        // plain types share the chunk's dictionary across the batches.
        let mut encoders: Vec<ColumnEncoder> = Vec::new();
        // Every batch is also written to bytes and read back, as the disk
        // tier keeps a squeezed batch, and checked again.
        let mut shelf = common::Shelf::default();
        let mut chunk_ascii = true;
        for batch in batches {
            chunk_ascii &= batch.iter().flatten().all(|s| s.is_ascii());
            let mut rng = Rng(seed);
            for (t, input) in inputs(batch, key, vt).into_iter().enumerate() {
                if encoders.len() <= t {
                    encoders.push(ColumnEncoder::with_compaction(input.data_type(), compaction));
                }
                let cut = rng.below(input.len() / 4 + 1);
                // The whole batch, then a slice of it (offset buffers and bitmaps).
                for input in [input.clone(), input.slice(cut, input.len() - cut)] {
                    let liquid = encoders[t].encode(&input).expect("supported type");
                    check_array(&*liquid, &input, batch, vt, chunk_ascii, &mut rng);
                    let back = shelf.round_trip(&liquid);
                    check_array(&*back, &input, batch, vt, chunk_ascii, &mut rng);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn liquid_bytes_equal_arrow(
        batches in prop::collection::vec(batch(), 1..4),
        key in 0..KEY_TYPES.len(),
        seed in any::<u64>(),
    ) {
        check_chunk(&batches, &KEY_TYPES[key], seed);
    }
}

fn url(i: usize) -> String {
    format!("https://www.example{}.com/path/{}/index.html", i % 7, i % 50)
}

#[test]
fn low_cardinality_picks_dict_fsst_and_distinct_does_not_pick_dict() {
    let mut encoder = BytesEncoder::new();
    let low: ArrayRef = Arc::new(StringArray::from_iter_values((0..4096).map(url)));
    let liquid = encoder.encode(&low).unwrap();
    assert_eq!(liquid.encoding(), "dict-fsst");
    assert_eq!(&liquid.to_arrow(), &low);

    let distinct: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..4096).map(|i| format!("{}{i}", url(i))),
    ));
    let liquid = encoder.encode(&distinct).unwrap();
    assert!(!liquid.encoding().starts_with("dict"), "{}", liquid.encoding());
    // Long and mostly alike: zstd over blocks beats FSST per value by far.
    assert_eq!(liquid.encoding(), "zstd");
    assert_eq!(&liquid.to_arrow(), &distinct);
    let fsst = BytesEncoder::with_compaction(Compaction::Never)
        .encode(&distinct)
        .unwrap();
    assert_eq!(fsst.encoding(), "fsst");
    assert!(liquid.heap_size() < fsst.heap_size());
    let liquid = fsst;
    let arrow_size = distinct.get_buffer_memory_size();
    assert!(
        liquid.heap_size() < arrow_size,
        "{} >= {arrow_size}",
        liquid.heap_size()
    );
}

#[test]
fn unsupported_types_and_literals_decline() {
    assert!(!silt_liquid::bytes::is_supported(&DataType::Int32));
    assert!(silt_liquid::bytes::is_supported(&DataType::Dictionary(
        Box::new(DataType::UInt8),
        Box::new(DataType::BinaryView)
    )));
    let mut encoder = BytesEncoder::new();
    let ints: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![1, 2]));
    assert!(encoder.encode(&ints).is_none());
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
    let liquid = encoder.encode(&strings).unwrap();
    let wrong = LiquidPredicate::Compare {
        op: CmpOp::Eq,
        literal: ints.clone(),
    };
    assert!(liquid.evaluate(&wrong).is_none());
    let two = LiquidPredicate::Compare {
        op: CmpOp::Eq,
        literal: strings.clone(),
    };
    assert!(liquid.evaluate(&two).is_none());
    let _ = make_array(strings.to_data());
}

#[test]
fn batches_of_a_column_share_one_dictionary() {
    let mut encoder = ColumnEncoder::new(&DataType::Utf8);
    let batches: Vec<ArrayRef> = (0..16)
        .map(|b| Arc::new(StringArray::from_iter_values((0..4096).map(|i| url(b * 4096 + i * 7)))) as ArrayRef)
        .collect();
    let liquid: Vec<_> = batches.iter().map(|b| encoder.encode(b).unwrap()).collect();
    for (l, b) in liquid.iter().zip(&batches) {
        assert!(l.encoding().starts_with("shared-dict"));
        assert_eq!(&l.to_arrow(), b);
    }
    // Later batches add no values: they cost only their keys (350 values: 9 bits).
    let later = liquid[15].heap_size();
    assert!(later < 4096 * 9 / 8 + 1024, "{later}");
    assert!(liquid[0].heap_size() > later);
    // A few rows decode only the entries they use; many rows take from all.
    for picks in [
        vec![Some(5), None, Some(4000), Some(5)],
        (0..4096).rev().map(Some).collect(),
    ] {
        let indices = UInt32Array::from(picks);
        let expected = take(&batches[15], &indices, None).unwrap();
        assert_eq!(&liquid[15].take(&indices), &expected);
    }
    // The memoized dictionary results give each batch its own rows' answer.
    let predicate = LiquidPredicate::Like {
        pattern: "%example3%".into(),
        negated: false,
        case_insensitive: false,
    };
    for (l, b) in liquid.iter().zip(&batches).rev() {
        let expected = arrow::compute::kernels::comparison::like(b, &StringArray::new_scalar("%example3%")).unwrap();
        assert_eq!(l.evaluate(&predicate), Some(expected));
    }
}

/// Past `MAX_SHARED_SEGMENTS` shared segments, new values go to a segment
/// private to the batch: every
/// batch still decodes and evaluates exactly and is charged for its own
/// values only.
#[test]
fn new_values_beyond_the_shared_segments_stay_private_and_exact() {
    use silt_liquid::shared_dict::MAX_SHARED_SEGMENTS;
    let mut encoder = ColumnEncoder::new(&DataType::Utf8);
    // Batch b repeats 40 common URLs and brings `fresh(b)` values of its own
    // (some batches a few, most dozens), with nulls.
    let fresh = |b: usize| if b % 5 == 3 { 3 } else { 40 + b };
    let batches: Vec<ArrayRef> = (0..MAX_SHARED_SEGMENTS + 12)
        .map(|b| {
            let rows = (0..1024).map(|i| match i % 17 {
                0 => None,
                _ if i % 2 == 0 && i / 2 < fresh(b) => Some(format!("batch{b}/only/{}", i / 2)),
                _ => Some(url(i % 40)),
            });
            Arc::new(StringArray::from_iter(rows)) as ArrayRef
        })
        .collect();
    let liquid: Vec<_> = batches.iter().map(|b| encoder.encode(b).unwrap()).collect();
    let pattern = "%only/1%";
    let predicate = LiquidPredicate::Like {
        pattern: pattern.into(),
        negated: false,
        case_insensitive: false,
    };
    let mut rng = Rng(7);
    for (b, (l, input)) in liquid.iter().zip(&batches).enumerate() {
        assert!(l.encoding().starts_with("shared-dict"), "batch {b}");
        assert_eq!(&l.to_arrow(), input, "batch {b}");
        check_filter_take(&**l, input, &mut rng);
        let expected = like(input, &StringArray::new_scalar(pattern)).unwrap();
        assert_eq!(l.evaluate(&predicate), Some(expected), "batch {b}");
        let eq = LiquidPredicate::Compare {
            op: CmpOp::Eq,
            literal: Arc::new(StringArray::from(vec![format!("batch{b}/only/2")])),
        };
        let expected = cmp::eq(input, &Scalar::new(StringArray::from(vec![format!("batch{b}/only/2")]))).unwrap();
        assert_eq!(l.evaluate(&eq), Some(expected), "batch {b}");
    }
    // A late batch's private values cost it about what they take, no more:
    // the shared segments are charged to the batches that made them.
    let last = liquid.last().unwrap().heap_size();
    assert!(last < 1024 * 4 + 80 * 64, "{last}");
}

/// Values that drift through a file (each batch shares a third of its values
/// with the previous one) fill the shared dictionary and make the encoder
/// start new ones; batches encoded before a new dictionary keep theirs.
#[test]
fn drifting_values_roll_the_dictionary_over_and_every_batch_stays_exact() {
    use silt_liquid::shared_dict::MAX_SHARED_SEGMENTS;
    let mut encoder = ColumnEncoder::new(&DataType::Int64);
    // Spread over 64 bits, so bit-packing the values themselves cannot win.
    let value = |v: i64| (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64;
    let batches: Vec<ArrayRef> = (0..MAX_SHARED_SEGMENTS as i64 * 3)
        .map(|b| {
            let rows = (0..1024i64).map(|i| (i % 31 != 0).then_some(value(b * 200 + i % 300)));
            Arc::new(arrow::array::Int64Array::from_iter(rows)) as ArrayRef
        })
        .collect();
    let liquid: Vec<_> = batches.iter().map(|b| encoder.encode(b).unwrap()).collect();
    let mut rng = Rng(11);
    for (b, (l, input)) in liquid.iter().zip(&batches).enumerate() {
        assert!(l.encoding().starts_with("shared-dict"), "batch {b}");
        assert_eq!(&l.to_arrow(), input, "batch {b}");
        check_filter_take(&**l, input, &mut rng);
        let literal = value(b as i64 * 200 + 250);
        let eq = LiquidPredicate::Compare {
            op: CmpOp::Eq,
            literal: Arc::new(arrow::array::Int64Array::from(vec![literal])),
        };
        let expected = cmp::eq(input, &Scalar::new(arrow::array::Int64Array::from(vec![literal]))).unwrap();
        assert_eq!(l.evaluate(&eq), Some(expected), "batch {b}");
    }
    // With a dictionary per run of batches, a batch pays for about its own
    // 200 new values and keys, not for a dictionary of every value so far.
    let last = liquid.last().unwrap().heap_size();
    assert!(last < 200 * 8 + 1024 * 2 + 256, "{last}");
}

/// A scan decodes a shared dictionary once and reuses it for later batches
/// (`take_reusing`): every batch's rows still equal Arrow's `take`, for few
/// and many rows, across more dictionaries than the scan keeps, and view
/// outputs carry only their own rows' bytes, not the whole dictionary's.
#[test]
fn take_reusing_a_decoded_dictionary_equals_take() {
    use arrow::array::{AsArray, StringViewArray};
    use silt_liquid::shared_dict::{DECODED_DICTIONARIES, DecodedDictionaries, MAX_SHARED_SEGMENTS};
    let long = |i: usize| format!("{}/a-long-enough-suffix-{}", url(i), i % 90);
    // The first batches bring the common values; most later ones only reuse
    // them (their segment lists are equal, so the scan's decoded dictionary
    // serves them), every fifth brings a new value of its own.
    let batches: Vec<ArrayRef> = (0..MAX_SHARED_SEGMENTS + DECODED_DICTIONARIES + 6)
        .map(|b| {
            let rows = (0..2048).map(|i| match i % 13 {
                0 => None,
                1 if b % 5 == 4 => Some(long(1000 + b)),
                _ if b < 3 => Some(long(i % 120)),
                _ => Some(long((i * 7 + b) % 120)),
            });
            Arc::new(StringViewArray::from_iter(rows)) as ArrayRef
        })
        .collect();
    let mut encoder = ColumnEncoder::new(&DataType::Utf8View);
    let liquid: Vec<_> = batches.iter().map(|b| encoder.encode(b).unwrap()).collect();
    let mut decoded = DecodedDictionaries::default();
    let mut rng = Rng(5);
    for round in 0..2 {
        for (b, (l, input)) in liquid.iter().zip(&batches).enumerate() {
            assert!(l.encoding().starts_with("shared-dict"), "batch {b}");
            let n = if (b + round) % 2 == 0 { 2000 } else { 7 };
            let indices = UInt32Array::from_iter_values((0..n).map(|_| rng.below(input.len()) as u32));
            let got = l.take_reusing(&indices, &mut decoded);
            assert_eq!(&got, &take(input, &indices, None).unwrap(), "batch {b}, {n} rows");
            let own: usize = got.as_string_view().iter().flatten().map(str::len).sum();
            let held: usize = got.as_string_view().data_buffers().iter().map(|d| d.len()).sum();
            assert!(
                held <= own + own / 2 + 256,
                "batch {b}: {held} bytes held for {own} bytes of rows"
            );
        }
    }
}

/// A column scans only filter on (`ValueUse::Filtered`) keeps its shared
/// segments as zstd blocks when clearly smaller, and every take from them
/// equals Arrow's `take`: of the rows a predicate matched (served from the
/// segments' memo of matched entries), of other rows, with and without the
/// scan's decoded segments.
#[test]
fn takes_of_the_rows_a_predicate_matched_equal_take() {
    use arrow::array::StringViewArray;
    use silt_liquid::ValueUse;
    use silt_liquid::shared_dict::DecodedDictionaries;
    let value = |i: usize| {
        let mix = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        format!(
            "https://www.example{}.com/catalog/{}/item-{i:05}?session={mix:x}&lang=en",
            i % 7,
            i % 40
        )
    };
    // Each batch repeats known values and brings some new ones (a segment each).
    let batches: Vec<ArrayRef> = (0..12)
        .map(|b| {
            let rows = (0..2048).map(|i| match i % 17 {
                0 => None,
                1..=3 => Some(value(1000 * (b + 1) + i)),
                _ => Some(value((i * 31 + b) % 300)),
            });
            Arc::new(StringViewArray::from_iter(rows)) as ArrayRef
        })
        .collect();
    let encode = |value_use: ValueUse| {
        let mut encoder = ColumnEncoder::new(&DataType::Utf8View);
        encoder.set_use(value_use);
        batches.iter().map(|b| encoder.encode(b).unwrap()).collect::<Vec<_>>()
    };
    let (taken, filtered) = (encode(ValueUse::Taken), encode(ValueUse::Filtered));
    let size = |l: &[silt_liquid::LiquidArrayRef]| l.iter().map(|a| a.heap_size()).sum::<usize>();
    // (The zstd form's 64 KiB dictionary is charged once per column.)
    assert!(
        size(&filtered) < size(&taken),
        "zstd segments {} bytes, FSST ones {}",
        size(&filtered),
        size(&taken)
    );
    let predicate = LiquidPredicate::Like {
        pattern: "%item-0001%".into(),
        negated: false,
        case_insensitive: false,
    };
    let mut decoded = DecodedDictionaries::default();
    let mut rng = Rng(11);
    for round in 0..2 {
        for (b, (l, input)) in filtered.iter().zip(&batches).enumerate() {
            assert!(l.encoding().starts_with("shared-dict"), "batch {b}");
            let mask = l.evaluate(&predicate).expect("LIKE on a shared dictionary");
            let expected = like(input, &Scalar::new(StringViewArray::from(vec!["%item-0001%"]))).unwrap();
            assert_eq!(mask, expected, "batch {b}");
            let kept = silt_liquid::selection_to_indices(&mask);
            assert!(kept.len() > 10, "batch {b}: {} rows matched", kept.len());
            let others = UInt32Array::from_iter_values((0..9).map(|_| rng.below(input.len()) as u32));
            for indices in [&kept, &others] {
                let want = take(input, indices, None).unwrap();
                assert_eq!(&l.take(indices), &want, "batch {b}, round {round}");
                assert_eq!(
                    &l.take_reusing(indices, &mut decoded),
                    &want,
                    "batch {b}, round {round}"
                );
                assert_eq!(&l.filter(&mask), &filter(input, &mask).unwrap(), "batch {b}");
            }
        }
    }
}

/// A proptest find: one-row batches of `""` (and slices of only empty
/// strings) hold no bytes in the flat form, and are still exact.
#[test]
fn batches_of_only_empty_strings() {
    for key in &KEY_TYPES {
        check_chunk(&[vec![Some(String::new())]], key, 284387591039688286);
        check_chunk(
            &[vec![Some("x".into()), Some(String::new()), Some(String::new())]],
            key,
            7,
        );
    }
}

/// Real URLs, titles and referers (ClickBench's sample, `shared/data`),
/// kept compact ([`Compaction::Always`]: zstd blocks for every batch and
/// for the shared dictionary's segments): every operation stays exact, and
/// they take at most 3/4 of what FSST takes. (Under the default, this
/// small sample repeats its values enough to take the shared dictionary;
/// mostly distinct values take zstd: see the test above.)
#[test]
fn real_urls_and_titles_kept_compact_stay_exact_and_small() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    // The directory cargo runs the test in, not the one it was compiled
    // in: a shared target dir may hold a binary built in another checkout.
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let path = crate_dir.join("../../../shared/data/nano_hits.parquet");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "the shared ClickBench sample beside the repository, {}: {e}",
            path.display()
        )
    });
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .with_batch_size(8192)
        .build()
        .unwrap();
    let batches: Vec<arrow::array::RecordBatch> = reader.map(Result::unwrap).collect();
    for column in ["URL", "Title", "Referer"] {
        let mut compact = ColumnEncoder::with_compaction(&DataType::Utf8, Compaction::Always);
        let mut fsst = ColumnEncoder::with_compaction(&DataType::Utf8, Compaction::Never);
        let (mut zstd_bytes, mut fsst_bytes) = (0, 0);
        for (b, batch) in batches.iter().enumerate() {
            let input = cast(batch.column_by_name(column).unwrap(), &DataType::Utf8).unwrap();
            let liquid = compact.encode(&input).unwrap();
            let other = fsst.encode(&input).unwrap();
            (zstd_bytes, fsst_bytes) = (zstd_bytes + liquid.heap_size(), fsst_bytes + other.heap_size());
            let texts: Batch = input.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect();
            let ascii = texts.iter().flatten().all(|t| t.is_ascii());
            check_array(&*liquid, &input, &texts, &DataType::Utf8, ascii, &mut Rng(b as u64));
        }
        assert!(
            zstd_bytes * 4 <= fsst_bytes * 3,
            "{column}: zstd {zstd_bytes} bytes against FSST's {fsst_bytes}"
        );
    }
}

#[test]
fn clustered_batches_keep_their_keys_as_runs_and_stay_exact() {
    let pool: Vec<String> = (0..300).map(url).collect();
    let batch = |from: usize| -> Batch {
        (from..from + 8192)
            .map(|i| (i % 13 != 0).then(|| pool[(i / 50) % pool.len()].clone()))
            .collect()
    };
    for vt in &VALUE_TYPES {
        let mut encoder = ColumnEncoder::new(vt);
        let mut shelf = common::Shelf::default();
        for (b, rows) in [batch(0), batch(8192)].iter().enumerate() {
            let input = value_array(rows, vt);
            let liquid = encoder.encode(&input).unwrap();
            assert_eq!(liquid.encoding(), "shared-dict-runs", "batch {b} of {vt}");
            let mut rng = Rng(b as u64);
            check_array(&*liquid, &input, rows, vt, true, &mut rng);
            check_array(&*shelf.round_trip(&liquid), &input, rows, vt, true, &mut rng);
        }
    }
}
