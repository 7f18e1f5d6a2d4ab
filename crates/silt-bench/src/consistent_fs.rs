//! `s3s-fs` with the read consistency S3 gives: a GET's ETag is the ETag of
//! the bytes it returns, and `If-Match` is honoured.
//!
//! `s3s-fs` opens the file, then computes the ETag by reading the path again,
//! and ignores `If-Match` on GET. When a file is replaced (written elsewhere
//! and renamed into place) between the two, the body is of the old version and
//! the ETag of the new one: no real S3 does that, and tests of version pinning
//! would be testing the emulator's race. This wrapper stats the file before and
//! after the inner GET and answers `503 SlowDown` (retried by clients) when it
//! changed in between, and `412 PreconditionFailed` when `If-Match` is not the
//! object's ETag. Every other operation goes to `s3s-fs` unchanged.

use std::path::PathBuf;

use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

/// `s3s_fs::FileSystem` with consistent GETs (see the module docs).
pub struct ConsistentFs {
    inner: s3s_fs::FileSystem,
    root: PathBuf,
}

impl ConsistentFs {
    pub fn new(inner: s3s_fs::FileSystem, root: PathBuf) -> Self {
        ConsistentFs { inner, root }
    }

    /// Identity of the file behind `bucket/key` now: inode, size, mtime.
    fn identity(&self, bucket: &str, key: &str) -> Option<(u64, u64, std::time::SystemTime)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(self.root.join(bucket).join(key)).ok()?;
        Some((m.ino(), m.len(), m.modified().ok()?))
    }
}

#[async_trait::async_trait]
impl S3 for ConsistentFs {
    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let if_match = req.input.if_match.clone();
        let before = self.identity(&bucket, &key);
        let out = self.inner.get_object(req).await?;
        if self.identity(&bucket, &key) != before {
            return Err(s3_error!(SlowDown, "the object changed while it was read; retry"));
        }
        if let Some(ETagCondition::ETag(want)) = if_match
            && !out.output.e_tag.as_ref().is_some_and(|got| got.strong_cmp(&want))
        {
            return Err(s3_error!(PreconditionFailed, "ETag does not match"));
        }
        Ok(out)
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        self.inner.head_object(req).await
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        self.inner.head_bucket(req).await
    }

    async fn list_buckets(&self, req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        self.inner.list_buckets(req).await
    }

    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
        self.inner.list_objects(req).await
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.inner.list_objects_v2(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.inner.get_bucket_location(req).await
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        self.inner.create_bucket(req).await
    }

    async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        self.inner.put_object(req).await
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.inner.delete_object(req).await
    }
}
