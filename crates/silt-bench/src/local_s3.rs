//! A real S3-compatible HTTP server on 127.0.0.1, in-process (`s3s-fs`, with
//! S3's read consistency: [`crate::consistent_fs`]), so
//! tests and benchmarks exercise the same signed S3 protocol a cloud bucket
//! would — without any network beyond loopback.
//!
//! Buckets are the sub-folders of the root directory; objects are files.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Credentials the local server accepts.
pub const ACCESS_KEY: &str = "silt-test-access";
pub const SECRET_KEY: &str = "silt-test-secret";
pub const REGION: &str = "us-east-1";

/// Settings that reach a loopback server at `endpoint` (one started by
/// [`LocalS3::start`], possibly in another process): the fixed credentials, HTTP allowed.
pub fn s3_settings_for(endpoint: &str) -> silt_store::S3Settings {
    silt_store::S3Settings {
        endpoint: Some(endpoint.to_string()),
        access_key_id: Some(ACCESS_KEY.into()),
        secret_access_key: Some(SECRET_KEY.into()),
        region: Some(REGION.into()),
        allow_http: Some(true),
        session_token: None,
    }
}

/// A running loopback S3 server. Stops when dropped.
pub struct LocalS3 {
    addr: SocketAddr,
    root: PathBuf,
    stop: watch::Sender<bool>,
    /// Closed (every sender dropped) once the accept loop and every
    /// connection task have ended: what [`LocalS3::stop_and_wait`] awaits.
    ended: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<()>>,
}

impl LocalS3 {
    /// Serve the folder `root` (each sub-folder is a bucket) on 127.0.0.1.
    pub async fn start(root: &Path) -> std::io::Result<LocalS3> {
        std::fs::create_dir_all(root)?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let mut builder = S3ServiceBuilder::new(crate::consistent_fs::ConsistentFs::new(fs, root.to_path_buf()));
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let (alive, ended) = tokio::sync::mpsc::channel::<()>(1);
        tokio::spawn(async move {
            let http = ConnBuilder::new(TokioExecutor::new());
            loop {
                let socket = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((socket, _)) => socket,
                        Err(_) => continue,
                    },
                    _ = stopped.changed() => break,
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                let mut stop_conn = stopped.clone();
                let alive = alive.clone();
                tokio::spawn(async move {
                    let _alive = alive;
                    tokio::select! {
                        _ = conn => {}
                        _ = stop_conn.changed() => {}
                    }
                });
            }
        });
        Ok(LocalS3 {
            addr,
            root: root.to_path_buf(),
            stop,
            ended: tokio::sync::Mutex::new(ended),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Settings that reach this server: endpoint, the fixed credentials, HTTP allowed.
    pub fn s3_settings(&self) -> silt_store::S3Settings {
        s3_settings_for(&self.endpoint())
    }

    /// Uploads every file below `src` into `bucket` (created if missing) with
    /// S3 PUTs, keyed by its path relative to `src`, unless an object of the
    /// same size is already there. Objects written through the S3 API have
    /// their ETag stored by the server; files placed in the folder directly
    /// get their MD5 recomputed on every request, which a benchmark must not
    /// pay (tests that overwrite files on disk rely on exactly that).
    /// Returns the bytes uploaded.
    pub async fn upload_dir(&self, src: &Path, bucket: &str) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        use object_store::ObjectStoreExt;
        std::fs::create_dir_all(self.root.join(bucket))?;
        let location = silt_store::TableLocation::parse(&format!("s3://{bucket}/"))?;
        let store = location.open(
            &self.s3_settings().into(),
            &std::sync::Arc::new(object_store::memory::InMemory::new()),
        )?;
        let mut uploaded = 0;
        for file in crate::files::files_below(src) {
            let Ok(rel) = file.strip_prefix(src) else { continue };
            let key = object_store::path::Path::from(rel.to_string_lossy().as_ref());
            let bytes = std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            if store.head(&key).await.is_ok_and(|m| m.size == bytes.len() as u64) {
                continue;
            }
            uploaded += bytes.len() as u64;
            store
                .put(&key, bytes.into())
                .await
                .map_err(|e| format!("uploading {key}: {e}"))?;
        }
        Ok(uploaded)
    }

    /// The folder holding the buckets.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Local path of `bucket/key` (to put or overwrite objects directly).
    pub fn object_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(key)
    }

    /// Stop accepting connections and close open ones.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// [`LocalS3::stop`], then wait until every open connection is closed,
    /// so no request (on a kept-alive connection) is answered afterwards.
    pub async fn stop_and_wait(&self) {
        self.stop();
        while self.ended.lock().await.recv().await.is_some() {}
    }
}

impl Drop for LocalS3 {
    fn drop(&mut self) {
        self.stop();
    }
}
