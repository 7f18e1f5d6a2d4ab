//! TLS to Silt servers: a server URL `grpc+tls://host:port` (or
//! `https://host:port`) connects over TLS, trusting the system's roots, or
//! instead one CA certificate when one is given: [`set_ca_pem`] (what
//! `silt query --tls-ca` does), else the PEM file named by the environment
//! variable `SILT_TLS_CA`. A self-signed server certificate is trusted by
//! naming it as that CA, provided it is not marked as a CA itself
//! (`basicConstraints` absent or `CA:FALSE`; rustls refuses a CA
//! certificate used as a server's: `CaUsedAsEndEntity`). `openssl req
//! -x509` marks it `CA:TRUE` unless given `-addext
//! "basicConstraints=critical,CA:FALSE"`.

use std::sync::OnceLock;

use tonic::transport::{Certificate, ClientTlsConfig};

use crate::client::ClientError;

/// Environment variable naming a PEM file of an extra trusted CA.
pub const CA_ENV: &str = "SILT_TLS_CA";

static CA_PEM: OnceLock<Vec<u8>> = OnceLock::new();

/// Trust `pem` (a PEM CA certificate) for every TLS connection this
/// process makes to Silt servers from now on. The first call wins.
pub fn set_ca_pem(pem: Vec<u8>) {
    let _ = CA_PEM.set(pem);
}

/// The extra CA: the one set, else `$SILT_TLS_CA`'s file.
fn extra_ca() -> Result<Option<Vec<u8>>, ClientError> {
    if let Some(pem) = CA_PEM.get() {
        return Ok(Some(pem.clone()));
    }
    match std::env::var_os(CA_ENV) {
        Some(path) => std::fs::read(&path)
            .map(Some)
            .map_err(|e| ClientError::Tls(format!("reading {CA_ENV}={}: {e}", path.to_string_lossy()))),
        None => Ok(None),
    }
}

/// The TLS settings of a connection to a server: the given CA when there
/// is one (so a host without a system CA bundle still connects), else the
/// system's roots.
pub fn client_config() -> Result<ClientTlsConfig, ClientError> {
    Ok(match extra_ca()? {
        Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
        None => ClientTlsConfig::new().with_native_roots(),
    })
}
