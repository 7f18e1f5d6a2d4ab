//! What an Iceberg manifest says of a data file's values, as
//! [`KnownValues`]: the column metrics (`lower_bounds`, `upper_bounds`,
//! `null_value_counts`, by field id) and what the file's partition tuple
//! implies of its source columns through the spec's transforms (hidden
//! partitioning: `day(ts) = 20784` bounds `ts` to that day; a filter on
//! `ts` then skips the file though no query names the partition).
//!
//! A `bucket[N]` tuple value is kept as the file's bucket of the column
//! ([`super::bucket`]): equality and `IN` filters rule out other buckets.
//!
//! Bounds are taken for booleans, integers, dates, timestamps, decimals and
//! strings (Iceberg's string bounds may be truncated, but the spec keeps
//! them bounds: a truncated upper bound is rounded up). Floats prune
//! nothing here (their bounds leave NaN out, which a filter may match).

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use serde_json::Value;
use silt_lakehouse::iceberg::{ContentFile, PartitionSpec, Transform};

use super::bounds::{ColumnBounds, KnownValues};
use crate::file_columns::field_id;

/// What `file`'s manifest entry says of the columns of `schema` (an
/// Iceberg table's schema in Arrow: each field carries its field id);
/// `spec`: the file's partition spec, if known.
pub(super) fn known_values(file: &ContentFile, schema: &Schema, spec: Option<&PartitionSpec>) -> KnownValues {
    // A count of 0 is what a missing one reads as: then none is known.
    let rows = u64::try_from(file.record_count).ok().filter(|&n| n > 0);
    // By field id once per file (a wide table has many).
    let (lower, upper) = (ids(&file.metrics.lower), ids(&file.metrics.upper));
    let nulls: HashMap<i32, u64> = file.metrics.nulls.iter().copied().collect();
    let columns = schema
        .fields()
        .iter()
        .filter_map(|field| {
            let id = field_id(field)?;
            let data_type = field.data_type();
            let decoded = |bytes: Option<&&[u8]>| decode(bytes?, data_type);
            let mut bounds = ColumnBounds {
                field_id: Some(id),
                min: decoded(lower.get(&id)),
                max: decoded(upper.get(&id)),
                nulls: nulls.get(&id).copied(),
                bucket: None,
            };
            let tuple = spec.into_iter().flat_map(|s| &s.fields).filter(|p| p.source_id == id);
            for partition in tuple {
                let Some(value) = file.partition.get(&partition.name) else {
                    continue;
                };
                if value.is_null() {
                    // Every transform but `void` maps only nulls to null; a
                    // float's NaN or infinity reads as null here too.
                    let float = matches!(data_type, DataType::Float16 | DataType::Float32 | DataType::Float64);
                    if partition.transform != Transform::Void && !float {
                        bounds.nulls = rows;
                    }
                    continue;
                }
                if let (Transform::Bucket(n), Some(b)) = (&partition.transform, value.as_i64()) {
                    bounds.nulls = Some(0);
                    bounds.bucket = i32::try_from(b).ok().map(|b| (*n, b));
                    continue;
                }
                let Some((lo, hi)) = transformed_range(&partition.transform, value, data_type) else {
                    continue;
                };
                bounds.nulls = Some(0);
                bounds.min = tighter(bounds.min.take(), lo, std::cmp::Ordering::Greater);
                bounds.max = tighter(bounds.max.take(), hi, std::cmp::Ordering::Less);
            }
            (bounds != ColumnBounds::default()).then(|| (field.name().clone(), bounds))
        })
        .collect::<HashMap<_, _>>();
    KnownValues { rows, columns }
}

/// Bounds by field id.
fn ids(of: &[(i32, Vec<u8>)]) -> HashMap<i32, &[u8]> {
    of.iter().map(|(id, bytes)| (*id, bytes.as_slice())).collect()
}

/// Of two bounds, the one `wanted` of the other (`Greater`: the higher
/// lower bound); either when only one is known or they do not compare.
fn tighter(a: Option<ScalarValue>, b: Option<ScalarValue>, wanted: std::cmp::Ordering) -> Option<ScalarValue> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.partial_cmp(&a) == Some(wanted) { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// A bound in Iceberg's single-value binary form (little-endian numbers,
/// big-endian unscaled decimals, UTF-8 strings) as a value of `data_type`.
/// An `int` bound of a column since promoted to `long` (4 bytes) widens.
fn decode(bytes: &[u8], data_type: &DataType) -> Option<ScalarValue> {
    let long = || match bytes.len() {
        4 => Some(i64::from(i32::from_le_bytes(bytes.try_into().ok()?))),
        8 => Some(i64::from_le_bytes(bytes.try_into().ok()?)),
        _ => None,
    };
    Some(match data_type {
        DataType::Boolean if bytes.len() == 1 => ScalarValue::Boolean(Some(bytes[0] != 0)),
        DataType::Decimal128(precision, scale) if (1..=16).contains(&bytes.len()) => {
            // Sign-extended big-endian two's complement.
            let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut wide = [fill; 16];
            wide[16 - bytes.len()..].copy_from_slice(bytes);
            ScalarValue::Decimal128(Some(i128::from_be_bytes(wide)), *precision, *scale)
        }
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
            string(std::str::from_utf8(bytes).ok()?, data_type)?
        }
        _ => integer(long()?, data_type)?,
    })
}

/// `v` as a value of an integer-backed `data_type` (integers, dates,
/// timestamps in their own unit), if it fits.
fn integer(v: i64, data_type: &DataType) -> Option<ScalarValue> {
    Some(match data_type {
        DataType::Int32 => ScalarValue::Int32(Some(i32::try_from(v).ok()?)),
        DataType::Int64 => ScalarValue::Int64(Some(v)),
        DataType::Date32 => ScalarValue::Date32(Some(i32::try_from(v).ok()?)),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => ScalarValue::TimestampMicrosecond(Some(v), tz.clone()),
        DataType::Timestamp(TimeUnit::Nanosecond, tz) => ScalarValue::TimestampNanosecond(Some(v), tz.clone()),
        _ => return None,
    })
}

fn string(s: &str, data_type: &DataType) -> Option<ScalarValue> {
    let s = Some(s.to_string());
    Some(match data_type {
        DataType::Utf8 => ScalarValue::Utf8(s),
        DataType::Utf8View => ScalarValue::Utf8View(s),
        DataType::LargeUtf8 => ScalarValue::LargeUtf8(s),
        _ => return None,
    })
}

/// The range of source values (of type `data_type`) that `transform` maps
/// to the tuple value `value` (as the manifest's JSON): `None` when it
/// bounds nothing (buckets, unknown transforms, types not read here).
fn transformed_range(
    transform: &Transform,
    value: &Value,
    data_type: &DataType,
) -> Option<(Option<ScalarValue>, Option<ScalarValue>)> {
    let same = |v: ScalarValue| Some((Some(v.clone()), Some(v)));
    match transform {
        Transform::Identity => match (value, data_type) {
            (Value::Bool(b), DataType::Boolean) => same(ScalarValue::Boolean(Some(*b))),
            (Value::String(s), _) => same(string(s, data_type)?),
            (Value::Number(n), _) => same(integer(n.as_i64()?, data_type)?),
            _ => None,
        },
        Transform::Truncate(width) => match (value, data_type) {
            // Strings cut to a prefix: at least the prefix.
            (Value::String(s), _) => Some((Some(string(s, data_type)?), None)),
            (Value::Number(n), DataType::Int32 | DataType::Int64) => {
                let low = n.as_i64()?;
                let high = low.checked_add(i64::from(*width) - 1)?;
                Some((Some(integer(low, data_type)?), Some(integer(high, data_type)?)))
            }
            _ => None,
        },
        Transform::Year | Transform::Month | Transform::Day | Transform::Hour => {
            let n = value.as_i64()?;
            let (first, next) = time_span(transform, n, data_type)?;
            Some((
                Some(integer(first, data_type)?),
                Some(integer(next.checked_sub(1)?, data_type)?),
            ))
        }
        Transform::Bucket(_) | Transform::Void | Transform::Unknown(_) => None,
    }
}

/// The first value and the one after the last of the `n`th year, month,
/// day or hour since the epoch, in `data_type`'s unit (days for dates).
fn time_span(transform: &Transform, n: i64, data_type: &DataType) -> Option<(i64, i64)> {
    // The spec's tuple values are ints: anything wider is damaged metadata.
    let n = i64::from(i32::try_from(n).ok()?);
    let per_day: i64 = match data_type {
        DataType::Date32 => 1,
        DataType::Timestamp(TimeUnit::Microsecond, _) => 86_400_000_000,
        DataType::Timestamp(TimeUnit::Nanosecond, _) => 86_400_000_000_000,
        _ => return None,
    };
    let month_start = |months: i64| days_from_civil(1970 + months.div_euclid(12), months.rem_euclid(12) + 1);
    let (first_day, next_day) = match transform {
        Transform::Year => (
            month_start(n.checked_mul(12)?),
            month_start(n.checked_add(1)?.checked_mul(12)?),
        ),
        Transform::Month => (month_start(n), month_start(n.checked_add(1)?)),
        Transform::Day => (n, n.checked_add(1)?),
        Transform::Hour if per_day > 1 => {
            let per_hour = per_day / 24;
            return Some((n.checked_mul(per_hour)?, n.checked_add(1)?.checked_mul(per_hour)?));
        }
        _ => return None,
    };
    Some((first_day.checked_mul(per_day)?, next_day.checked_mul(per_day)?))
}

/// Days from 1970-01-01 to the first of `month` (1-12) of `year`, in the
/// proleptic Gregorian calendar (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5; // the first of the month
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use object_store::path::Path;
    use serde_json::json;
    use silt_lakehouse::iceberg::{ColumnMetrics, FileContent, PartitionField};

    use crate::lakehouse::FileBounds;
    use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;

    fn with_id(field: Field, id: i32) -> Field {
        field.with_metadata(HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]))
    }

    #[test]
    fn civil_days_and_spans() {
        assert_eq!(days_from_civil(1970, 1), 0);
        assert_eq!(days_from_civil(2026, 11), 20_758);
        assert_eq!(days_from_civil(1969, 12), -31);
        assert_eq!(days_from_civil(2000, 3), 11_017);
        let date = DataType::Date32;
        // Month 682 is 2026-11: its 30 days.
        assert_eq!(time_span(&Transform::Month, 682, &date), Some((20_758, 20_788)));
        assert_eq!(time_span(&Transform::Year, -1, &date), Some((-365, 0)));
        assert_eq!(time_span(&Transform::Hour, 5, &date), None, "hours of a date");
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(
            time_span(&Transform::Hour, 2, &micros),
            Some((7_200_000_000, 10_800_000_000))
        );
    }

    #[test]
    fn metrics_and_tuples_bound_their_source_columns() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        let schema = Schema::new(vec![
            with_id(Field::new("id", DataType::Int64, true), 1),
            with_id(Field::new("ts", ts.clone(), true), 2),
            with_id(Field::new("name", DataType::Utf8View, true), 3),
            with_id(Field::new("price", DataType::Decimal128(10, 2), true), 4),
            with_id(Field::new("x", DataType::Float64, true), 5),
            with_id(Field::new("cat", DataType::Utf8View, true), 6),
        ]);
        let spec = PartitionSpec {
            spec_id: 1,
            fields: vec![
                PartitionField {
                    source_id: 2,
                    name: "ts_day".into(),
                    transform: Transform::Day,
                },
                PartitionField {
                    source_id: 1,
                    name: "id_trunc".into(),
                    transform: Transform::Truncate(1000),
                },
                PartitionField {
                    source_id: 6,
                    name: "cat".into(),
                    transform: Transform::Identity,
                },
            ],
        };
        let file = ContentFile {
            content: FileContent::Data,
            path: "x".into(),
            format: "PARQUET".into(),
            record_count: 100,
            size: 1,
            sequence_number: 1,
            partition: json!({"ts_day": 20784, "id_trunc": 2000, "cat": null}),
            spec_id: 1,
            equality_ids: Vec::new(),
            metrics: ColumnMetrics {
                // `id` written as an `int` (promoted since): 4 bytes.
                lower: vec![
                    (1, 2100i32.to_le_bytes().to_vec()),
                    (3, b"n0".to_vec()),
                    (4, vec![0xfe, 0x0c]),
                    (5, 1.5f64.to_le_bytes().to_vec()),
                ],
                upper: vec![
                    (1, 9000i64.to_le_bytes().to_vec()),
                    (3, b"n9".to_vec()),
                    (4, vec![0x01, 0x00]),
                ],
                nulls: vec![(3, 4)],
            },
        };
        let known = known_values(&file, &schema, Some(&spec));
        let path = Path::from("x");
        let stats = FileBounds::new(HashMap::from([(path.clone(), known)])).statistics(&path, &schema, &[]);
        assert_eq!(stats.rows, Some(100));
        // The manifest's lower bound is tighter; the tuple's upper (2999).
        assert_eq!(stats.min[0], Some(ScalarValue::Int64(Some(2100))));
        assert_eq!(stats.max[0], Some(ScalarValue::Int64(Some(2999))));
        let day = 20_784i64 * 86_400_000_000;
        let at = |v| Some(ScalarValue::TimestampMicrosecond(Some(v), Some("+00:00".into())));
        assert_eq!(
            (stats.min[1].clone(), stats.max[1].clone()),
            (at(day), at(day + 86_399_999_999))
        );
        assert_eq!(stats.nulls[1], Some(0));
        assert_eq!(stats.min[2], Some(ScalarValue::Utf8View(Some("n0".into()))));
        assert_eq!(stats.nulls[2], Some(4));
        assert_eq!(stats.min[3], Some(ScalarValue::Decimal128(Some(-500), 10, 2)));
        assert_eq!(stats.max[3], Some(ScalarValue::Decimal128(Some(256), 10, 2)));
        assert_eq!((stats.min[4].clone(), stats.max[4].clone()), (None, None), "floats");
        assert_eq!(
            (stats.min[5].clone(), stats.nulls[5]),
            (None, Some(100)),
            "a null identity value: all null"
        );

        // Planned with another schema: a column of another field id under
        // a name gets nothing; a narrower type casts.
        let other = Schema::new(vec![
            with_id(Field::new("id", DataType::Int64, true), 9),
            with_id(Field::new("name", DataType::Utf8, true), 3),
        ]);
        let known = known_values(&file, &schema, Some(&spec));
        let stats = FileBounds::new(HashMap::from([(path.clone(), known)])).statistics(&path, &other, &[]);
        assert_eq!(stats.min[0], None);
        assert_eq!(stats.max[1], Some(ScalarValue::Utf8(Some("n9".into()))));
    }

    #[test]
    fn tuples_that_bound_nothing() {
        let long = DataType::Int64;
        assert_eq!(transformed_range(&Transform::Bucket(4), &json!(3), &long), None);
        assert_eq!(
            transformed_range(&Transform::Unknown("z".into()), &json!(3), &long),
            None
        );
        assert_eq!(
            transformed_range(&Transform::Truncate(3), &json!("ab"), &DataType::Utf8View),
            Some((Some(ScalarValue::Utf8View(Some("ab".into()))), None))
        );
        assert_eq!(
            transformed_range(&Transform::Truncate(10), &json!(i64::MAX), &long),
            None,
            "overflow"
        );
        assert_eq!(decode(&[1, 2, 3], &long), None);
    }
}
