//! The Parquet reader's view of one object: bytes through the cached store,
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
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use silt_cache::CachedStore;

/// Reads one object's byte ranges through the cache tiers.
pub struct CachedFileReader {
    pub store: Arc<CachedStore>,
    pub location: Path,
    pub metadata: Arc<ParquetMetaData>,
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for CachedFileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move { self.store.get_range(&self.location, range).await.map_err(external) }.boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move { self.store.get_ranges(&self.location, &ranges).await.map_err(external) }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        let metadata = self.metadata.clone();
        async move { Ok(metadata) }.boxed()
    }
}
