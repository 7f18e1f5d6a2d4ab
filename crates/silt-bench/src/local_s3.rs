//! A real S3-compatible HTTP server on 127.0.0.1, in-process (`s3s-fs`), so
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

/// A running loopback S3 server. Stops when dropped.
pub struct LocalS3 {
    addr: SocketAddr,
    root: PathBuf,
    stop: watch::Sender<bool>,
}

impl LocalS3 {
    /// Serve the folder `root` (each sub-folder is a bucket) on 127.0.0.1.
    pub async fn start(root: &Path) -> std::io::Result<LocalS3> {
        std::fs::create_dir_all(root)?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
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
                tokio::spawn(async move {
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
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
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
}

impl Drop for LocalS3 {
    fn drop(&mut self) {
        self.stop();
    }
}
