//! The Parquet reader's view of one pinned object version: bytes through the cached store,
//! metadata from the metadata tier (already decoded, never fetched again).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::{ParquetError, Result};
use datafusion::parquet::file::metadata::ParquetMetaData;
use futures::FutureExt;
use futures::future::BoxFuture;
use silt_cache::{CacheError, CachedStore, PinnedObject};

/// Reads one pinned object version's byte ranges through the cache tiers.
pub struct CachedFileReader {
    pub store: Arc<CachedStore>,
    /// The version every read is of.
    pub object: PinnedObject,
    pub metadata: Arc<ParquetMetaData>,
}

/// Keeps the typed cache error as the Parquet error's source.
fn external(e: CacheError) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for CachedFileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move {
            let mut bytes = self
                .store
                .read_pinned(&self.object, std::slice::from_ref(&range))
                .await
                .map_err(external)?;
            Ok(bytes.pop().unwrap_or_default())
        }
        .boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move { self.store.read_pinned(&self.object, &ranges).await.map_err(external) }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        let metadata = self.metadata.clone();
        async move { Ok(metadata) }.boxed()
    }
}
