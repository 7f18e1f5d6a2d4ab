//! Why the server's listeners could not start or stopped: typed so a
//! caller of [`crate::start`] can tell a port in use from a failed service.

use std::net::SocketAddr;

/// A listener or one of its tasks that failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The address could not be bound (in use, not local, not permitted).
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The bound listener has no local address.
    #[error("{0}")]
    LocalAddr(#[source] std::io::Error),
    /// The Flight service stopped with an error.
    #[error("Flight service: {0}")]
    Flight(#[source] tonic::transport::Error),
    /// An HTTP listener (`name`: the admin endpoint or the S3 API) stopped
    /// with an error.
    #[error("{name} endpoint: {source}")]
    Http {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A listener's task panicked or was cancelled.
    #[error("{0}")]
    Task(#[source] tokio::task::JoinError),
}
