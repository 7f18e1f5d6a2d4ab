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

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use futures::stream::BoxStream;
}

/// Implements `ObjectStore` for a read-path wrapper whose field `inner:
/// Arc<dyn ObjectStore>` is the store it wraps: the read methods given in the
/// block, plus writes, deletes, copies and renames forwarded unchanged (Silt
/// never writes to object stores; the wrappers forward writes only to
/// satisfy the trait), and `Debug`/`Display` as `Name(inner)`.
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
                payload: ::object_store::PutPayload,
                opts: ::object_store::PutOptions,
            ) -> ::object_store::Result<::object_store::PutResult> {
                self.inner.put_opts(location, payload, opts).await
            }

            async fn put_multipart_opts(
                &self,
                location: &::object_store::path::Path,
                opts: ::object_store::PutMultipartOptions,
            ) -> ::object_store::Result<Box<dyn ::object_store::MultipartUpload>> {
                self.inner.put_multipart_opts(location, opts).await
            }

            fn delete_stream(
                &self,
                locations: $crate::wrapper::__private::BoxStream<
                    'static,
                    ::object_store::Result<::object_store::path::Path>,
                >,
            ) -> $crate::wrapper::__private::BoxStream<'static, ::object_store::Result<::object_store::path::Path>> {
                self.inner.delete_stream(locations)
            }

            async fn copy_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::CopyOptions,
            ) -> ::object_store::Result<()> {
                self.inner.copy_opts(from, to, options).await
            }

            async fn rename_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::RenameOptions,
            ) -> ::object_store::Result<()> {
                self.inner.rename_opts(from, to, options).await
            }
        }
    };
}
