//! TLS for both listeners (`--tls-cert`, `--tls-key`): the Flight service
//! through tonic's rustls support, the admin endpoint and the S3 API through
//! tokio-rustls in front of their axum routers. rustls with the `ring` provider, TLS
//! 1.2 and 1.3; the certificate and key are PEM files read at start-up, so
//! a bad file stops the server with a clear error rather than the first
//! client's handshake.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::config::ServerConfig;
use crate::error::{ConfigError, ServerError, TlsError};

/// A client that does not finish its handshake in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The PEM certificate chain and key of a TLS server.
#[derive(Clone)]
pub struct TlsFiles {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl TlsFiles {
    /// The files `config` names, if it serves TLS.
    pub fn load(config: &ServerConfig) -> Result<Option<TlsFiles>, ServerError> {
        let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
            return Ok(None);
        };
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| ServerError::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let files = TlsFiles {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        };
        // Parse now: a bad file fails the start, naming the file.
        files.rustls_config().map_err(|source| ConfigError::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            source,
        })?;
        Ok(Some(files))
    }

    /// The Flight service's TLS settings.
    pub fn tonic_config(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem))
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// The HTTP listeners' TLS settings (HTTP/1.1 and HTTP/2 by ALPN).
    pub fn rustls_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<_, _>>()
            .map_err(TlsError::Certificate)?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(TlsError::PrivateKey)?;
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A connection still open this long after shutdown is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` (the HTTP listener `name`: admin or S3 API) over TLS on
/// `listener` until `shutdown` fires, then lets
/// open connections finish their requests (at most [`DRAIN_TIMEOUT`]).
/// Each connection's handshake and requests run on a task of their own, so
/// a slow or hostile client holds up nobody else; a client that does not
/// finish its handshake or send its request headers in time is dropped.
pub async fn serve_https(
    listener: TcpListener,
    app: Router,
    files: TlsFiles,
    mut shutdown: oneshot::Receiver<()>,
    name: &'static str,
) -> Result<(), ServerError> {
    let config = files.rustls_config().map_err(ConfigError::Tls)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let (closing, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("{name} endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot disable Nagle's algorithm on an {name} connection: {e}");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, "{name} endpoint: TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "{name} endpoint: TLS handshake timed out");
                    return;
                }
            };
            let mut builder = ConnBuilder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                _ = async { drop(closing.wait_for(|c| *c).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, "{name} endpoint: connection ended: {e}");
            }
        });
    }
    let _ = closing.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "{name} endpoint: connections still open after shutdown were dropped"
        );
        connections.shutdown().await;
    }
    Ok(())
}
