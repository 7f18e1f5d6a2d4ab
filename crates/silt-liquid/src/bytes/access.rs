//! One view over every supported Arrow byte type: reading rows as byte
//! slices, and building an array of a given type back from byte slices.
//!
//! Everything else in the module works on `&[u8]`, so Utf8, LargeUtf8,
//! Utf8View, Binary, LargeBinary, BinaryView and their dictionaries share
//! one implementation.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryViewBuilder, GenericByteArray, GenericByteViewArray, UInt32Array, make_array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{
    ArrowNativeType, BinaryType, ByteArrayType, ByteViewType, DataType, LargeBinaryType, LargeUtf8Type, Utf8Type,
};

/// Whether `data_type` is a plain (non-dictionary) byte type.
pub(crate) fn is_value_type(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView
    )
}

/// The type of the values: the dictionary's value type, or `data_type` itself.
pub(crate) fn value_type(data_type: &DataType) -> &DataType {
    match data_type {
        DataType::Dictionary(_, v) => v,
        other => other,
    }
}

/// Whether the values are UTF-8 (LIKE applies).
pub(crate) fn is_utf8(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(value_type(data_type), Utf8 | LargeUtf8 | Utf8View)
}

/// The value of every row of `array` (null rows as empty slices), or `None`
/// when the type is not a supported byte type.
pub(crate) fn row_values(array: &dyn Array) -> Option<Vec<&[u8]>> {
    use DataType::*;
    Some(match array.data_type() {
        Utf8 => offset_values(array.as_string::<i32>()),
        LargeUtf8 => offset_values(array.as_string::<i64>()),
        Binary => offset_values(array.as_binary::<i32>()),
        LargeBinary => offset_values(array.as_binary::<i64>()),
        Utf8View => view_values(array.as_string_view()),
        BinaryView => view_values(array.as_binary_view()),
        Dictionary(_, v) if is_value_type(v) => dictionary_values(array),
        _ => return None,
    })
}

fn offset_values<T: ByteArrayType>(array: &GenericByteArray<T>) -> Vec<&[u8]> {
    let offsets = array.value_offsets();
    let data = array.value_data();
    (0..array.len())
        .map(|i| match array.is_valid(i) {
            true => &data[offsets[i].as_usize()..offsets[i + 1].as_usize()],
            false => &[][..],
        })
        .collect()
}

fn view_values<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> Vec<&[u8]> {
    (0..array.len())
        .map(|i| match array.is_valid(i) {
            true => AsRef::<[u8]>::as_ref(array.value(i)),
            false => &[],
        })
        .collect()
}

fn dictionary_values(array: &dyn Array) -> Vec<&[u8]> {
    let dict = array.as_any_dictionary();
    let values = row_values(dict.values().as_ref()).unwrap_or_default();
    if values.is_empty() {
        // Every key is null (a dictionary without values has no valid key).
        return vec![&[]; array.len()];
    }
    dict.normalized_keys().into_iter().map(|k| values[k]).collect()
}

/// The logical nulls of `array` (a dictionary's include null values) in a
/// buffer of their own, so an encoded batch never pins its input's memory;
/// `None` when no row is null.
pub(crate) fn own_nulls(array: &dyn Array) -> Option<NullBuffer> {
    let nulls = array.logical_nulls()?;
    (nulls.null_count() > 0).then(|| NullBuffer::new(nulls.iter().collect::<BooleanBuffer>()))
}

/// An array of `data_type` (a plain byte type) with `rows` (`None` = null).
pub(crate) fn build_flat(data_type: &DataType, rows: &[Option<&[u8]>]) -> ArrayRef {
    use DataType::*;
    match data_type {
        Utf8 => build_offsets::<Utf8Type>(rows),
        LargeUtf8 => build_offsets::<LargeUtf8Type>(rows),
        Binary => build_offsets::<BinaryType>(rows),
        LargeBinary => build_offsets::<LargeBinaryType>(rows),
        // SAFETY: the bytes decode exactly what was encoded from an array of
        // this type, so they are valid UTF-8; checking again cost 10% of a scan.
        Utf8View => Arc::new(unsafe { build_views(rows).to_string_view_unchecked() }),
        BinaryView => Arc::new(build_views(rows)),
        other => unreachable!("not a byte value type: {other}"),
    }
}

fn build_offsets<T: ByteArrayType>(rows: &[Option<&[u8]>]) -> ArrayRef {
    let total = rows.iter().flatten().map(|v| v.len()).sum();
    let mut data = Vec::with_capacity(total);
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(T::Offset::usize_as(0));
    for row in rows {
        data.extend_from_slice(row.unwrap_or_default());
        offsets.push(T::Offset::from_usize(data.len()).expect("byte array offset overflow"));
    }
    // SAFETY: offsets are ascending ends within `data`, and the bytes decode
    // exactly what was encoded from an array of this type (valid UTF-8 for
    // string types), so validating them again would only cost time.
    let array = unsafe {
        GenericByteArray::<T>::new_unchecked(
            OffsetBuffer::new_unchecked(offsets.into()),
            Buffer::from_vec(data),
            nulls_of(rows),
        )
    };
    Arc::new(array)
}

fn build_views(rows: &[Option<&[u8]>]) -> GenericByteViewArray<arrow::datatypes::BinaryViewType> {
    let mut builder = BinaryViewBuilder::with_capacity(rows.len());
    for row in rows {
        match row {
            Some(v) => builder.append_value(v),
            None => builder.append_null(),
        }
    }
    builder.finish()
}

fn nulls_of(rows: &[Option<&[u8]>]) -> Option<NullBuffer> {
    let valid: BooleanBuffer = rows.iter().map(Option::is_some).collect();
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// A dictionary array of `data_type` (`Dictionary(K, V)`) with `entries` as
/// its values and `keys` (`None` = null) indexing them.
pub(crate) fn build_dictionary(data_type: &DataType, entries: &[&[u8]], keys: Vec<Option<u32>>) -> ArrayRef {
    let DataType::Dictionary(key_type, value_type) = data_type else {
        unreachable!("not a dictionary type: {data_type}")
    };
    let values: Vec<Option<&[u8]>> = entries.iter().copied().map(Some).collect();
    let values = build_flat(value_type, &values);
    let keys = UInt32Array::from(keys);
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    // Entries are distinct values of the input, so they fit its key type.
    let keys = cast_with_options(&keys, key_type, &strict).expect("dictionary keys fit the key type");
    let data = keys
        .to_data()
        .into_builder()
        .data_type(data_type.clone())
        .child_data(vec![values.to_data()])
        .build()
        .expect("valid dictionary");
    make_array(data)
}
