//! The S3 operations Silt serves, as an [`s3s::S3`] implementation: s3s
//! parses each request into its input and writes each output (headers, XML);
//! every operation not written here answers `NotImplemented` — no write is
//! ever served.

use std::sync::Arc;

use s3s::dto::{
    Bucket as BucketInfo, GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput,
    HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListObjectsV2Input, ListObjectsV2Output,
};
use s3s::{S3, S3Request, S3Response, S3Result};

use super::bucket::Bucket;
use super::listing::{ListParams, list_objects};
use super::peers::{FORWARDED, PeerRoute, Peers};
use crate::catalog::EntryKind;
use crate::engine::Engine;

/// Silt's tables as S3 buckets (read-only).
pub(super) struct TableBuckets {
    pub engine: Arc<Engine>,
    /// The fleet GETs are read across, when `[cluster]` names one.
    pub peers: Option<Arc<Peers>>,
}

#[async_trait::async_trait]
impl S3 for TableBuckets {
    /// ListBuckets: every registered table (not views), available or not.
    async fn list_buckets(&self, _req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        let buckets = self
            .engine
            .catalog()
            .into_iter()
            .filter(|(_, entry)| matches!(entry.kind, EntryKind::Table { .. }))
            .map(|(name, _)| BucketInfo {
                name: Some(name),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    /// HeadBucket: 200 for a table that can be read.
    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        Bucket::open(&self.engine, &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    /// ListObjectsV2 over the table's keys.
    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let bucket = Bucket::open(&self.engine, &req.input.bucket).await?;
        let params = ListParams::from_input(&req.input)?;
        let entries = bucket.objects().await?;
        Ok(S3Response::new(list_objects(&bucket.name, &entries, params)))
    }

    /// GetObject, whole or one `Range`. Conditional headers are not honoured.
    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let bucket = Bucket::open(&self.engine, &req.input.bucket).await?;
        // A GET another member forwarded is served here, whoever owns it.
        let route = self
            .peers
            .clone()
            .filter(|_| !req.headers.contains_key(FORWARDED))
            .map(|peers| PeerRoute {
                peers,
                table: bucket.name.clone(),
                key: req.input.key.clone(),
            });
        Ok(S3Response::new(
            bucket.get(&req.input.key, req.input.range, route).await?,
        ))
    }

    /// HeadObject: GetObject's headers without the body.
    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let bucket = Bucket::open(&self.engine, &req.input.bucket).await?;
        Ok(S3Response::new(bucket.head(&req.input.key).await?))
    }
}
