//! What is wrong with a server's configuration: each refusal keeps the
//! setting and the values it names, so a caller (a test, the CLI, an
//! operator tool) can tell which check failed without reading the message.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::ServerError;

/// A configuration the server refuses to start with (or a view whose SQL,
/// being configuration, does not plan). Its text is what the operator sees
/// after `configuration: `.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for a [`crate::config::ServerConfig`].
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    /// A `--table`/`--view` argument without `=`.
    #[error("expected {what}, got '{arg}'")]
    Assignment { what: &'static str, arg: String },
    /// A table or view name that is not a plain identifier.
    #[error("invalid table or view name '{name}': use letters, digits and '_', not starting with a digit")]
    InvalidName { name: String },
    /// A `[catalogs.NAME]` entry Silt cannot serve.
    #[error("catalog '{name}': {reason}")]
    Catalog { name: String, reason: String },
    /// One name given both to a table and to a view.
    #[error("'{name}' is defined both as a table and as a view")]
    TableAndView { name: String },
    #[error("page_size must be between 1 byte and 256 MiB, got {page_size}")]
    PageSize { page_size: u64 },
    /// A `[store]` fault rate outside `0..=1`.
    #[error("{setting} must be between 0 and 1, got {rate}")]
    Rate { setting: &'static str, rate: f64 },
    /// A setting that must be positive (a rate, a timeout).
    #[error("{setting} must be positive")]
    NotPositive { setting: &'static str },
    #[error("TLS needs both tls_cert and tls_key (--tls-cert, --tls-key)")]
    TlsHalf,
    /// The auth token would cross a non-loopback listener in plaintext.
    #[error(
        "refusing to accept the auth token in plaintext on {addr} (not a loopback address): \
         serve TLS with --tls-cert and --tls-key, or pass --allow-insecure if the network is trusted"
    )]
    PlaintextToken { addr: SocketAddr },
    #[error("s3_api needs both access_key_id and secret_access_key, neither empty")]
    S3ApiKeys,
    /// A `memory://` table: the server's in-memory store has no writer, so
    /// such a table could only ever be empty.
    #[error(
        "table '{name}': memory:// URLs are not served (nothing can write to the server's in-memory store); \
         use file://, s3://, gs:// or az://"
    )]
    MemoryTable { name: String },
    /// A `[gcs]` or `[azure]` key (server-wide or a table's) that is not one
    /// of object_store's keys for that store.
    #[error("{context}: {source}")]
    StoreSetting {
        context: String,
        #[source]
        source: silt_store::StoreError,
    },
    /// `cluster.self` names no member of `cluster.servers`.
    #[error("cluster.self {self_url:?} is not in cluster.servers")]
    SelfNotAMember { self_url: String },
    /// No single member of `cluster.servers` is this server's listener.
    #[error("cannot tell which of cluster.servers is this server (listening on {listen}): set cluster.self")]
    SelfUnknown { listen: SocketAddr },
    #[error("cluster.admin lists {admin} URLs for {servers} cluster.servers: give one per server, in the same order")]
    AdminCount { admin: usize, servers: usize },
    #[error(
        "cluster.admin pairs admin URLs with cluster.servers by position, which a membership file or DNS name \
         cannot keep: set cluster.admin_port (every member's admin listener on that port of its host)"
    )]
    AdminWithMembership,
    #[error("cluster: set cluster.admin or cluster.admin_port, not both")]
    AdminTwice,
    /// `cluster.servers` names no member at start.
    #[error("cluster.servers: {message}")]
    Membership { message: String },
    #[error("cluster.servers lists {url:?} twice: members are placed by name and paired with admin URLs by position")]
    RepeatedMember { url: String },
    #[error("cluster: {url:?} is not a URL")]
    NotAUrl { url: String },
    /// The TLS certificate or key files do not make a TLS configuration.
    #[error("TLS certificate {} / key {}: {source}", cert.display(), key.display())]
    TlsFiles {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: TlsError,
    },
    /// The admin listener's TLS configuration could not be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The Flight listener's TLS configuration was refused by tonic.
    #[error("TLS: {0}")]
    FlightTls(#[source] tonic::transport::Error),
    /// A view's SQL does not parse, names unknown tables or does not plan.
    #[error("view '{name}': {source}")]
    View {
        name: String,
        #[source]
        source: Box<ServerError>,
    },
    /// The engine's catalog lacks the catalog the system tables go in.
    #[error("catalog '{catalog}' is missing")]
    MissingCatalog { catalog: &'static str },
}

/// A byte size (`64MiB`, `1.5GB`) that does not parse. An error type of its
/// own, not a [`ConfigError`], because command-line parsers and serde use it
/// outside any configuration check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("invalid size '{input}'")]
    Number { input: String },
    #[error("invalid size unit '{unit}' in '{input}' (use B, KiB, MiB, GiB, KB, MB, GB)")]
    Unit { unit: String, input: String },
}

/// Why PEM certificate and key bytes do not make a rustls configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the certificate: {0}")]
    Certificate(#[source] rustls::pki_types::pem::Error),
    #[error("the certificate file holds no CERTIFICATE block")]
    NoCertificate,
    #[error("reading the private key: {0}")]
    PrivateKey(#[source] rustls::pki_types::pem::Error),
    /// rustls refused the protocol versions or the certificate and key.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}
