//! The boilerplate every `ObjectStore` wrapper of Silt's read path shares.

use bytes::Bytes;
use futures::StreamExt;
use object_store::{Attributes, GetResult, GetResultPayload, ObjectMeta};
use std::ops::Range;

/// A `GetResult` whose body has already been read: wrappers that must see the
/// whole body (to check its length, cut it, or serve it from a cache) hand it
/// on as a one-chunk stream.
pub fn buffered_result(meta: ObjectMeta, range: Range<u64>, attributes: Attributes, body: Bytes) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(body) }).boxed()),
        meta,
        range,
        attributes,
    }
}

/// The error every write through a read-path wrapper gets.
pub fn read_only(store: &str, op: &str, location: &object_store::path::Path) -> object_store::Error {
    object_store::Error::NotSupported {
        source: format!("{store} is read-only: refused to {op} {location} (Silt never writes to object stores)").into(),
    }
}

/// A delete stream that refuses every path it is given.
pub fn refuse_deletes(
    store: &'static str,
    locations: futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>,
) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
    locations
        .map(move |l| l.and_then(|l| Err(read_only(store, "delete", &l))))
        .boxed()
}

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use futures::stream::BoxStream;
}

/// Implements `ObjectStore` for a read-path wrapper whose field `inner:
/// Arc<dyn ObjectStore>` is the store it wraps: the read methods given in the
/// block, plus `Debug`/`Display` as `Name(inner)`. Writes, deletes, copies
/// and renames are refused with `NotSupported`: Silt never writes to object
/// stores, and a write forwarded past a wrapper would skip its namespacing
/// and its cache invalidation.
///
/// ```ignore
/// silt_store::read_path_store!(MyStore, "MyStore", {
///     async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> { ... }
///     fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> { ... }
/// });
/// ```
#[macro_export]
macro_rules! read_path_store {
    ($ty:ty, $name:literal, { $($reads:tt)* }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($name, "({})"), self.inner)
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($name, "({})"), self.inner)
            }
        }

        #[$crate::wrapper::__private::async_trait]
        impl ::object_store::ObjectStore for $ty {
            $($reads)*

            async fn put_opts(
                &self,
                location: &::object_store::path::Path,
                _payload: ::object_store::PutPayload,
                _opts: ::object_store::PutOptions,
            ) -> ::object_store::Result<::object_store::PutResult> {
                Err($crate::wrapper::read_only($name, "put", location))
            }

            async fn put_multipart_opts(
                &self,
                location: &::object_store::path::Path,
                _opts: ::object_store::PutMultipartOptions,
            ) -> ::object_store::Result<Box<dyn ::object_store::MultipartUpload>> {
                Err($crate::wrapper::read_only($name, "put", location))
            }

            fn delete_stream(
                &self,
                locations: $crate::wrapper::__private::BoxStream<
                    'static,
                    ::object_store::Result<::object_store::path::Path>,
                >,
            ) -> $crate::wrapper::__private::BoxStream<'static, ::object_store::Result<::object_store::path::Path>> {
                $crate::wrapper::refuse_deletes($name, locations)
            }

            async fn copy_opts(
                &self,
                from: &::object_store::path::Path,
                _to: &::object_store::path::Path,
                _options: ::object_store::CopyOptions,
            ) -> ::object_store::Result<()> {
                Err($crate::wrapper::read_only($name, "copy", from))
            }

            async fn rename_opts(
                &self,
                from: &::object_store::path::Path,
                _to: &::object_store::path::Path,
                _options: ::object_store::RenameOptions,
            ) -> ::object_store::Result<()> {
                Err($crate::wrapper::read_only($name, "rename", from))
            }
        }
    };
}
