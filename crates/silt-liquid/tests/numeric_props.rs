//! Property tests: every numeric and boolean liquid encoding equals Arrow.
//!
//! For random batches (nulls, extremes, lengths across the 1024-value block
//! boundary) the liquid array must decode to the input, and `filter`, `take`
//! and every predicate must equal the Arrow kernel on the decoded array.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, Decimal128Array, Float64Array, Int8Array, Int16Array,
    Int64Array, PrimitiveArray, Scalar, TimestampNanosecondArray, UInt32Array,
};
use arrow::compute::kernels::cmp;
use arrow::compute::{and_kleene, filter, is_not_null, is_null, not, or_kleene, take};
use arrow::datatypes::*;
use proptest::prelude::*;
use silt_liquid::{CmpOp, ColumnEncoder, LiquidArrayRef, LiquidPredicate};

mod common;
use common::OPS;

fn encode(array: &ArrayRef) -> LiquidArrayRef {
    assert!(silt_liquid::is_supported(array.data_type()));
    ColumnEncoder::new(array.data_type())
        .encode(array)
        .expect("supported type encodes")
}

/// splitmix64: deterministic pseudo-random choices from the case's seed.
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn scalar(literal: &ArrayRef) -> Scalar<ArrayRef> {
    Scalar::new(literal.clone())
}

fn expected_in_list(array: &ArrayRef, values: &ArrayRef, negated: bool) -> BooleanArray {
    let unset = arrow::buffer::BooleanBuffer::new_unset(array.len());
    let mut found = BooleanArray::new(unset, array.nulls().cloned());
    for i in 0..values.len() {
        let eq = cmp::eq(array, &scalar(&values.slice(i, 1))).unwrap();
        found = or_kleene(&found, &eq).unwrap();
    }
    if negated { not(&found).unwrap() } else { found }
}

/// A literal of another type than `array`'s.
fn wrong_literal(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Int8 => Arc::new(Int16Array::from(vec![1])),
        _ => Arc::new(Int8Array::from(vec![1])),
    }
}

/// Checks round trip, filter, take and every predicate against Arrow.
/// Encodes `array` as the second batch of a column chunk whose first batch
/// was its first half (so a chunk dictionary, if chosen, spans two segments),
/// and checks that first batch's round trip too. Both are written to bytes
/// and read back as the disk tier does ([`common::Shelf`]): the checks run
/// on the second batch read back.
fn encode_in_chunk(array: &ArrayRef) -> Result<LiquidArrayRef, TestCaseError> {
    let mut encoder = ColumnEncoder::new(array.data_type());
    let mut shelf = common::Shelf::default();
    let half = array.slice(0, array.len() / 2);
    let first = encoder.encode(&half).expect("supported type encodes");
    prop_assert_eq!(&first.to_arrow(), &half);
    prop_assert_eq!(&shelf.round_trip(&first).to_arrow(), &half);
    let second = encoder.encode(array).expect("supported type encodes");
    prop_assert_eq!(&second.to_arrow(), array);
    Ok(shelf.round_trip(&second))
}

fn check_all(array: ArrayRef, mut literals: Vec<ArrayRef>, list: ArrayRef, seed: u64) -> Result<(), TestCaseError> {
    let len = array.len();
    let liquid = encode_in_chunk(&array)?;
    prop_assert_eq!(liquid.data_type(), array.data_type());
    prop_assert_eq!(liquid.len(), len);
    prop_assert_eq!(liquid.null_count(), array.null_count());
    prop_assert!(
        [
            "for-bitpack",
            "plain",
            "alp",
            "bitmap",
            "shared-dict",
            "shared-dict-runs",
            "dominant"
        ]
        .contains(&liquid.encoding())
    );
    prop_assert_eq!(&liquid.to_arrow(), &array);

    if len > 2 {
        let sliced = array.slice(1, len - 2);
        prop_assert_eq!(&encode(&sliced).to_arrow(), &sliced);
    }

    let selection: BooleanArray = (0..len as u64)
        .map(|i| match mix(seed, i) % 5 {
            0 => None,
            1 | 2 => Some(true),
            _ => Some(false),
        })
        .collect();
    prop_assert_eq!(&liquid.filter(&selection), &filter(&array, &selection).unwrap());

    let indices: UInt32Array = (0..(mix(seed, 1) % (2 * len as u64 + 3)))
        .map(|j| {
            let h = mix(seed ^ 0xABCD, j);
            (len > 0 && !h.is_multiple_of(7)).then(|| (h % len as u64) as u32)
        })
        .collect();
    prop_assert_eq!(&liquid.take(&indices), &take(&array, &indices, None).unwrap());

    for k in 0..3u64 {
        if len > 0 {
            literals.push(array.slice((mix(seed, 100 + k) % len as u64) as usize, 1));
        }
    }
    for literal in &literals {
        for (op, kernel) in OPS {
            let expected = kernel(&array, &scalar(literal)).unwrap();
            let predicate = LiquidPredicate::Compare {
                op,
                literal: literal.clone(),
            };
            prop_assert_eq!(liquid.evaluate(&predicate), Some(expected), "{:?} {:?}", op, literal);
        }
    }
    for (i, low) in literals.iter().enumerate() {
        let high = &literals[(i + 1) % literals.len()];
        let expected = and_kleene(
            &cmp::gt_eq(&array, &scalar(low)).unwrap(),
            &cmp::lt_eq(&array, &scalar(high)).unwrap(),
        )
        .unwrap();
        let predicate = LiquidPredicate::Between {
            low: low.clone(),
            high: high.clone(),
        };
        prop_assert_eq!(liquid.evaluate(&predicate), Some(expected), "{:?} {:?}", low, high);
    }
    for values in [list.clone(), list.slice(0, 0), list.slice(0, list.len().min(1))] {
        for negated in [false, true] {
            let expected = expected_in_list(&array, &values, negated);
            let predicate = LiquidPredicate::InList {
                values: values.clone(),
                negated,
            };
            prop_assert_eq!(liquid.evaluate(&predicate), Some(expected), "{:?}", values);
        }
    }
    prop_assert_eq!(
        liquid.evaluate(&LiquidPredicate::IsNull),
        Some(is_null(&array).unwrap())
    );
    prop_assert_eq!(
        liquid.evaluate(&LiquidPredicate::IsNotNull),
        Some(is_not_null(&array).unwrap())
    );
    let like = LiquidPredicate::Like {
        pattern: "a%".into(),
        negated: false,
        case_insensitive: false,
    };
    prop_assert!(liquid.evaluate(&like).is_none());
    let wrong = LiquidPredicate::Compare {
        op: CmpOp::Eq,
        literal: wrong_literal(&array),
    };
    prop_assert!(liquid.evaluate(&wrong).is_none());
    Ok(())
}

/// Batches of an integer type `$t` (extremes and random values drawn as
/// `$wide`): per case a mode picks narrow, medium, extreme or random values,
/// so every bit width and the plain fallback are exercised.
macro_rules! int_case {
    ($t:ty, $wide:ty) => {
        (any::<$wide>(), 0u8..7, 0usize..3000).prop_flat_map(|(base, mode, len)| {
            let base = base as $t;
            let near = move |span: u16| (0..span).prop_map(move |d| Some(base.wrapping_add(d as $t)));
            let extreme = prop_oneof![
                Just(<$wide>::MIN as $t),
                Just(<$wide>::MAX as $t),
                Just(0 as $t),
                Just(base.wrapping_sub(1 as $t)),
            ]
            .prop_map(Some);
            let random = any::<$wide>().prop_map(|v| Some(v as $t));
            let elem: BoxedStrategy<Option<$t>> = match mode {
                0 => prop_oneof![1 => Just(None), 6 => near(16)].boxed(),
                1 => prop_oneof![1 => Just(None), 6 => near(5000)].boxed(),
                2 => prop_oneof![1 => Just(None), 6 => near(300), 1 => extreme.clone()].boxed(),
                // Few values spread over the whole range: a dictionary beats
                // bit-packing (in runs under mode 6, below).
                3 | 6 => prop_oneof![
                    1 => Just(None),
                    6 => (0u32..40).prop_map(move |k| Some(((base as $wide).rotate_left(k) ^ (k as $wide)) as $t)),
                ]
                .boxed(),
                4 => prop_oneof![1 => Just(None), 3 => random.clone()].boxed(),
                // One value in ~95% of the rows: the dominant form.
                _ => prop_oneof![1 => Just(None), 2 => random.clone(), 60 => Just(Some(base))].boxed(),
            };
            let literal = prop_oneof![Just(None), near(20), extreme, random];
            (
                prop::collection::vec(elem, len).prop_map(move |v| if mode == 6 { in_runs(v) } else { v }),
                prop::collection::vec(literal, 3),
            )
        })
    };
}

/// `values` clustered into runs of 37 rows taking their first row's value
/// (nulls kept where they were, so some fall inside runs): a dictionary's
/// keys as runs.
fn in_runs<T: Copy>(values: Vec<Option<T>>) -> Vec<Option<T>> {
    let head = |i: usize| values[i / 37 * 37..].iter().flatten().next().copied();
    (0..values.len()).map(|i| values[i].and_then(|_| head(i))).collect()
}

/// Batches of a float type: exact 2-decimal prices (ALP), prices sprinkled
/// with specials (ALP exceptions), and random bits (plain).
macro_rules! float_case {
    ($t:ty) => {
        (0u8..4, 0usize..3000).prop_flat_map(|(mode, len)| {
            let price = (-100_000i32..100_000).prop_map(|c| Some(c as $t / 100.0));
            let special = prop_oneof![
                Just(<$t>::NAN),
                Just(-<$t>::NAN),
                Just(<$t>::from_bits(<$t>::NAN.to_bits() + 1)),
                Just(-0.0),
                Just(0.0),
                Just(<$t>::INFINITY),
                Just(<$t>::NEG_INFINITY),
                Just(<$t>::MIN),
                Just(<$t>::MAX),
                Just(<$t>::MIN_POSITIVE),
                Just(<$t>::from_bits(1)),
                Just(0.1),
                Just(12.34),
            ]
            .prop_map(Some);
            let random = any::<$t>().prop_map(Some);
            let elem: BoxedStrategy<Option<$t>> = match mode {
                0 => prop_oneof![1 => Just(None), 10 => price.clone()].boxed(),
                1 => prop_oneof![1 => Just(None), 300 => price.clone(), 1 => special.clone()].boxed(),
                2 => prop_oneof![1 => Just(None), 3 => price.clone(), 2 => special.clone(), 2 => random.clone()].boxed(),
                _ => prop_oneof![1 => Just(None), 1 => special.clone(), 3 => random.clone()].boxed(),
            };
            let literal = prop_oneof![Just(None), price, special, random];
            (
                prop::collection::vec(elem, len),
                prop::collection::vec(literal, 3),
            )
        })
    };
}

/// One property test for one Arrow type.
macro_rules! numeric_props {
    ($($name:ident: $arrow:ty, $dt:expr, $case:expr;)*) => {$(
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(96))]
            #[test]
            fn $name(((values, lits), seed) in ($case, any::<u64>())) {
                let data_type: DataType = $dt;
                type Native = <$arrow as ArrowPrimitiveType>::Native;
                let make = |v: Vec<Option<Native>>| -> ArrayRef {
                    Arc::new(PrimitiveArray::<$arrow>::from(v).with_data_type(data_type.clone()))
                };
                let literals = lits.iter().map(|l| make(vec![*l])).collect();
                let list_values = lits.iter().chain(values.iter().take(40)).flatten().copied();
                let list = make(list_values.map(Some).collect());
                check_all(make(values), literals, list, seed)?;
            }
        }
    )*};
}

numeric_props! {
    int8: Int8Type, DataType::Int8, int_case!(i8, i8);
    int16: Int16Type, DataType::Int16, int_case!(i16, i16);
    int32: Int32Type, DataType::Int32, int_case!(i32, i32);
    int64: Int64Type, DataType::Int64, int_case!(i64, i64);
    uint8: UInt8Type, DataType::UInt8, int_case!(u8, u8);
    uint16: UInt16Type, DataType::UInt16, int_case!(u16, u16);
    uint32: UInt32Type, DataType::UInt32, int_case!(u32, u32);
    uint64: UInt64Type, DataType::UInt64, int_case!(u64, u64);
    date32: Date32Type, DataType::Date32, int_case!(i32, i32);
    date64: Date64Type, DataType::Date64, int_case!(i64, i64);
    time32_s: Time32SecondType, DataType::Time32(TimeUnit::Second), int_case!(i32, i32);
    time64_ns: Time64NanosecondType, DataType::Time64(TimeUnit::Nanosecond), int_case!(i64, i64);
    timestamp_ns_tz: TimestampNanosecondType,
        DataType::Timestamp(TimeUnit::Nanosecond, Some("+01:00".into())), int_case!(i64, i64);
    timestamp_ms: TimestampMillisecondType,
        DataType::Timestamp(TimeUnit::Millisecond, None), int_case!(i64, i64);
    duration_us: DurationMicrosecondType, DataType::Duration(TimeUnit::Microsecond), int_case!(i64, i64);
    decimal128: Decimal128Type, DataType::Decimal128(38, 2), int_case!(i128, i64);
    float32: Float32Type, DataType::Float32, float_case!(f32);
    float64: Float64Type, DataType::Float64, float_case!(f64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn boolean(
        values in prop::collection::vec(prop::option::of(any::<bool>()), 0..3000),
        lits in prop::collection::vec(prop::option::of(any::<bool>()), 3),
        seed in any::<u64>(),
    ) {
        let make = |v: Vec<Option<bool>>| -> ArrayRef { Arc::new(BooleanArray::from(v)) };
        let literals = lits.iter().map(|l| make(vec![*l])).collect();
        let list = make(lits.iter().flatten().map(|b| Some(*b)).collect());
        check_all(make(values), literals, list, seed)?;
    }
}

#[test]
fn alp_is_chosen_for_prices_with_two_decimals() {
    let prices: Vec<f64> = (0..8192).map(|i| (i * 37 % 100_000) as f64 / 100.0 + 5.0).collect();
    let array: ArrayRef = Arc::new(Float64Array::from(prices));
    let liquid = encode(&array);
    assert_eq!(liquid.encoding(), "alp");
    assert!(liquid.heap_size() < 8192 * 8 / 3, "{}", liquid.heap_size());
    assert_eq!(&liquid.to_arrow(), &array);
}

#[test]
fn alp_keeps_rare_specials_as_exceptions() {
    let mut values: Vec<Option<f64>> = (0..4000).map(|i| Some(i as f64 / 10.0)).collect();
    values[7] = Some(f64::NAN);
    values[1500] = Some(-0.0);
    values[2047] = Some(f64::NEG_INFINITY);
    values[3000] = None;
    values[3999] = Some(std::f64::consts::PI);
    let array: ArrayRef = Arc::new(Float64Array::from(values));
    let liquid = encode(&array);
    assert_eq!(liquid.encoding(), "alp");
    assert_eq!(&liquid.to_arrow(), &array);
}

#[test]
fn full_precision_floats_stay_plain() {
    let values: Vec<f64> = (0..5000).map(|i| f64::from_bits(mix(7, i) >> 2)).collect();
    let array: ArrayRef = Arc::new(Float64Array::from(values));
    assert_eq!(encode(&array).encoding(), "plain");
}

#[test]
fn narrow_integers_pack_and_full_range_stays_plain() {
    let narrow: ArrayRef = Arc::new(Int64Array::from_iter_values((0..4096).map(|i| 1_000_000 + i % 8)));
    let liquid = encode(&narrow);
    assert_eq!(liquid.encoding(), "for-bitpack");
    // 4096 values of 3 bits in u8 words.
    assert_eq!(liquid.heap_size(), 4096 * 3 / 8);

    let wide: ArrayRef = Arc::new(Int64Array::from(vec![i64::MIN, 0, i64::MAX]));
    assert_eq!(encode(&wide).encoding(), "plain");
}

#[test]
fn heap_size_counts_the_null_buffer() {
    let values: Vec<Option<i32>> = (0..2048).map(|i| (i % 3 != 0).then_some(i)).collect();
    let array: ArrayRef = Arc::new(arrow::array::Int32Array::from(values));
    let liquid = encode(&array);
    // 2048 offsets of 11 bits in u16 words, plus 2048 validity bits.
    assert_eq!(liquid.heap_size(), 2048 * 11 / 8 + 2048 / 8);
}

#[test]
fn decimals_beyond_u64_offsets_are_not_encoded() {
    let array: ArrayRef =
        Arc::new(Decimal128Array::from(vec![i128::MIN, 0, i128::MAX]).with_data_type(DataType::Decimal128(38, 0)));
    assert!(silt_liquid::integer::encode(&array).is_none());
    let just_fits: ArrayRef = Arc::new(Decimal128Array::from(vec![-5, i128::from(u64::MAX) - 5]));
    let liquid = silt_liquid::integer::encode(&just_fits).expect("offsets fit in u64");
    assert_eq!(liquid.encoding(), "for-bitpack");
    assert_eq!(&liquid.to_arrow(), &just_fits);
}

#[test]
fn timestamps_keep_their_time_zone() {
    let array: ArrayRef =
        Arc::new(TimestampNanosecondArray::from(vec![Some(1), None, Some(3)]).with_timezone("Europe/Paris"));
    let liquid = encode(&array);
    assert_eq!(liquid.to_arrow().data_type(), array.data_type());
    let selection = BooleanArray::from(vec![true, true, false]);
    assert_eq!(liquid.filter(&selection).data_type(), array.data_type());
}

#[test]
fn all_null_batches_cost_only_their_validity() {
    let array: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>; 3000]));
    let liquid = encode(&array);
    assert_eq!(&liquid.to_arrow(), &array);
    // At most the validity bitmap (the dominant form holds one null and no exceptions).
    assert!(liquid.heap_size() <= 3000usize.div_ceil(8), "{}", liquid.heap_size());
}

#[test]
fn float16_is_not_supported() {
    assert!(!silt_liquid::float::is_supported(&DataType::Float16));
    assert!(silt_liquid::float::is_supported(&DataType::Float64));
    assert!(silt_liquid::boolean::is_supported(&DataType::Boolean));
    assert!(silt_liquid::integer::is_supported(&DataType::Timestamp(
        TimeUnit::Second,
        Some("UTC".into())
    )));
}

#[test]
fn a_mostly_default_column_takes_the_dominant_form() {
    let values: Vec<i16> = (0..8192)
        .map(|i| if i % 50 == 7 { (i % 300) as i16 + 1 } else { 0 })
        .collect();
    let array: ArrayRef = Arc::new(Int16Array::from(values));
    let liquid = encode(&array);
    assert_eq!(liquid.encoding(), "dominant");
    assert_eq!(&liquid.to_arrow(), &array);
    assert!(
        liquid.heap_size() * 8 < array.get_array_memory_size(),
        "{}",
        liquid.heap_size()
    );
}

/// Exceptions in runs (a clustered table's mostly-empty column): a run costs
/// what one exception did, and every check against Arrow holds.
#[test]
fn clustered_exceptions_take_the_dominant_form_as_runs() {
    let values: Vec<Option<i16>> = (0..8192)
        .map(|i| match i % 1000 {
            100..=139 => Some((i / 1000) as i16 + 1),
            140..=149 => None,
            _ => Some(0),
        })
        .collect();
    let array: ArrayRef = Arc::new(Int16Array::from(values));
    let liquid = encode(&array);
    assert_eq!(liquid.encoding(), "dominant");
    // Sixteen runs of exceptions, not 450 exceptions.
    assert!(liquid.heap_size() < 512, "{}", liquid.heap_size());
    let literals = vec![Arc::new(Int16Array::from(vec![3])) as ArrayRef];
    let list: ArrayRef = Arc::new(Int16Array::from(vec![0, 2, 5]));
    check_all(array, literals, list, 7).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// Sorted batches without nulls (a key column written in key order) take
    /// the binary-search path of the comparisons: narrow values with many
    /// duplicates, and wide ones spread over the whole range.
    #[test]
    fn sorted_integers(
        mut narrow in prop::collection::vec(-50i64..50, 0..3000),
        mut wide in prop::collection::vec(any::<u32>(), 0..3000),
        lits in prop::collection::vec(prop::option::of(-60i64..60), 3),
        seed in any::<u64>(),
    ) {
        narrow.sort_unstable();
        wide.sort_unstable();
        let make = |v: Vec<Option<i64>>| -> ArrayRef { Arc::new(Int64Array::from(v)) };
        let literals = lits.iter().map(|l| make(vec![*l])).collect();
        let list = lits.iter().flatten().copied().chain(narrow.iter().step_by(97).copied());
        check_all(make(narrow.iter().map(|v| Some(*v)).collect()), literals, make(list.map(Some).collect()), seed)?;
        let make = |v: Vec<Option<u32>>| -> ArrayRef { Arc::new(UInt32Array::from(v)) };
        let literals = [Some(0), wide.first().map(|v| v.saturating_sub(1)), Some(u32::MAX)].map(|l| make(vec![l]));
        let list = wide.iter().step_by(89).copied().map(Some).collect();
        check_all(make(wide.iter().map(|v| Some(*v)).collect()), literals.to_vec(), make(list), seed)?;
    }
}

/// Plain floats of every length read back from their bytes, the empty one
/// too: its values once came back in a byte-aligned buffer (an empty
/// `Vec<u8>`'s pointer is 1), which Arrow refuses for `Float64`
/// (found by `float64` above).
#[test]
fn plain_floats_of_any_length_read_back_aligned() {
    let mut shelf = common::Shelf::default();
    for len in [0u64, 1, 3, 8, 100] {
        let values: Vec<f64> = (0..len).map(|i| f64::from_bits(mix(11, i) >> 2)).collect();
        let array: ArrayRef = Arc::new(Float64Array::from(values));
        let liquid = encode(&array);
        let back = shelf.round_trip(&liquid);
        assert_eq!(&back.to_arrow(), &array, "{len} values");
    }
}
