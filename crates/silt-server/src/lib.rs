//! The Silt cache server: Flight SQL service, pushdown scans, admin HTTP.
//!
//! [`start`] binds the listeners, registers the configured tables and views
//! and returns a [`ServerHandle`]; the `silt serve` command and the tests both
//! use it, so the embedded server is the real server.

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod change_notices;
pub mod cluster;
pub mod config;
pub mod drain;
pub mod engine;
pub mod error;
pub mod fleet_view;
pub mod flight;
pub mod guard;
pub mod history;
pub mod memory_pressure;
pub mod metrics;
pub mod partial_aggregate;
pub mod preload;
pub mod query;
pub mod registry;
pub mod s3_api;
pub mod server_tiers;
pub mod settings;
pub mod stats;
pub mod system_tables;
pub mod table_metrics;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::info;

pub use config::ServerConfig;
pub use engine::Engine;
pub use error::ServerError;
use error::TransportError;
pub use query::QueryRunner;

/// How long stopping may wait for calls still open after a drain.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Largest gRPC message accepted (requests are small; results are split
/// into messages of a few MiB by the encoder).
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A running server. Dropping the handle does not stop it; call
/// [`ServerHandle::shutdown`].
pub struct ServerHandle {
    /// Where Flight SQL listens (the real port when 0 was asked for).
    pub flight_addr: SocketAddr,
    /// Where the admin HTTP endpoint listens, if enabled.
    pub admin_addr: Option<SocketAddr>,
    /// Where the S3 API listens at the root, if enabled (`[s3_api] listen`).
    pub s3_addr: Option<SocketAddr>,
    pub engine: Arc<Engine>,
    shutdown: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<Result<(), ServerError>>>,
    /// Tasks that live as long as the server (the history sampler, the
    /// expiry of kept plans).
    background: Vec<JoinHandle<()>>,
    /// Kernel watches of `file://` tables under `notify` (dropped with the
    /// handle: the tables then rely on the sweep).
    _file_watches: Option<change_notices::file_watch::FileWatches>,
}

impl ServerHandle {
    /// `http://host:port` of the Flight service, for clients on this host
    /// (`https://localhost:port` when it serves TLS, whatever address it is
    /// bound to: the name a test certificate is issued for).
    pub fn flight_url(&self) -> String {
        if self.engine.config().tls() {
            format!("https://localhost:{}", self.flight_addr.port())
        } else {
            format!("http://{}", self.flight_addr)
        }
    }

    /// Stop accepting, finish in-flight calls, and wait for the tasks.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        for tx in self.shutdown.drain(..) {
            let _ = tx.send(());
        }
        for t in self.background.drain(..) {
            t.abort();
        }
        for t in self.tasks.drain(..) {
            t.await.map_err(TransportError::Task)??;
        }
        Ok(())
    }

    /// Drains ([`drain`]): refuses new queries from now on, waits until
    /// what runs has finished or `timeout` passed, then stops like
    /// [`ServerHandle::shutdown`]. Returns how many requests were still
    /// running when it stopped (cut by the timeout; 0 after a full drain).
    pub async fn drain(self, timeout: std::time::Duration) -> Result<usize, ServerError> {
        let drain = self.engine.drain().clone();
        drain.begin();
        info!(running = drain.running(), ?timeout, "draining");
        drain.until_idle(timeout).await;
        let cut = drain.running();
        // Stopping waits for open calls; requests the timeout cut must not
        // hold the process past it for long.
        match tokio::time::timeout(STOP_GRACE, self.shutdown()).await {
            Ok(stopped) => stopped?,
            Err(_) => tracing::warn!(?STOP_GRACE, "calls still open after the drain; stopping without them"),
        }
        Ok(cut)
    }

    /// Resolves when a listener stops by itself (with its error; normally
    /// never): what `silt serve` waits on besides its stop signal.
    pub async fn wait_for_failure(&mut self) -> Result<(), ServerError> {
        if self.tasks.is_empty() {
            return std::future::pending().await;
        }
        let (ended, index) = {
            let (ended, index, _) = futures::future::select_all(self.tasks.iter_mut()).await;
            (ended, index)
        };
        self.tasks.remove(index);
        ended.map_err(TransportError::Task)?
    }

    /// Run until the server stops (for `silt serve`).
    pub async fn wait(mut self) -> Result<(), ServerError> {
        for t in self.tasks.drain(..) {
            t.await.map_err(TransportError::Task)??;
        }
        Ok(())
    }
}

/// Start a server with `config`.
pub async fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
    config.validate()?;
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| TransportError::Listen { addr, source })
    };
    let flight_listener = bind(config.listen).await?;
    let admin_listener = match config.admin {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let s3_listener = match config.s3_api.listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let flight_addr = flight_listener.local_addr().map_err(TransportError::LocalAddr)?;
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    let s3_addr = s3_listener.as_ref().and_then(|l| l.local_addr().ok());

    let tls_files = tls::TlsFiles::load(&config)?;
    let metrics = metrics::ServerMetrics::new();
    let auth_token = config.auth_token.clone().filter(|t| !t.is_empty());
    let tiers = server_tiers::ServerTiers::open(&config, &metrics)?;
    let engine = Engine::new(config, metrics, tiers)?;
    let runner = QueryRunner::new(engine.clone());
    // The observers: each takes the engine, none is started by it.
    system_tables::register(&engine)?;
    memory_pressure::spawn(Arc::downgrade(&engine), engine.config().memory_pressure_floor);
    // Registration reads the tables' footers: through a disk tier that has
    // not read back its pages yet, each read would miss and go to the store.
    wait_for_disk_recovery(&engine).await;
    engine.start_registration(engine.config().registration_wait).await;
    let background = vec![stats::spawn_sampler(&engine), runner.spawn_plan_expiry()];
    let file_watches = change_notices::file_watch::start(&engine);

    let mut shutdown = Vec::new();
    let mut tasks = Vec::new();

    let (tx, rx) = oneshot::channel::<()>();
    shutdown.push(tx);
    let service = FlightServiceServer::new(flight::SiltFlightService::new(runner))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(usize::MAX);
    let service = tonic::service::interceptor::InterceptedService::new(service, auth::BearerAuth::new(auth_token));
    let mut builder = tonic::transport::Server::builder();
    if let Some(files) = &tls_files {
        builder = builder
            .tls_config(files.tonic_config())
            .map_err(|e| ServerError::Config(error::ConfigError::FlightTls(e)))?;
    }
    tasks.push(tokio::spawn(async move {
        builder
            .add_service(service)
            .serve_with_incoming_shutdown(no_delay(flight_listener), async {
                let _ = rx.await;
            })
            .await
            .map_err(|e| TransportError::Flight(e).into())
    }));
    info!(%flight_addr, "Flight SQL listening");

    let http_listeners = [
        (
            admin_listener,
            "admin",
            admin::router as fn(Arc<Engine>) -> axum::Router,
        ),
        (s3_listener, "S3 API", s3_api::root_router),
    ];
    for (listener, name, router) in http_listeners {
        let Some(listener) = listener else { continue };
        let (tx, rx) = oneshot::channel::<()>();
        shutdown.push(tx);
        tasks.push(tokio::spawn(serve_http(
            listener,
            router(engine.clone()),
            tls_files.clone(),
            rx,
            name,
        )));
    }

    Ok(ServerHandle {
        flight_addr,
        admin_addr,
        s3_addr,
        engine,
        shutdown,
        tasks,
        background,
        _file_watches: file_watches,
    })
}

/// Waits (at most `registration_wait`) until the disk tier has read back
/// the pages a previous run left. A restart is warm only once it knows
/// them: until then every read misses and goes to the store, and a restarted
/// fleet member under load (registration's footer reads first) refetched
/// more than a cold pass. An empty cache directory recovers at once.
async fn wait_for_disk_recovery(engine: &Arc<Engine>) {
    let Some(disk) = engine.disk_tier().cloned() else {
        return;
    };
    if disk.recovery_done() {
        return;
    }
    let started = std::time::Instant::now();
    let limit = engine.config().registration_wait;
    let waited = tokio::time::timeout(limit, tokio::task::spawn_blocking(move || disk.wait_recovered())).await;
    match waited {
        Ok(_) => info!(elapsed = ?started.elapsed(), "disk tier read back before serving"),
        Err(_) => tracing::warn!(
            ?limit,
            "disk tier still reading back its pages; serving anyway (they count as misses until read)"
        ),
    }
}

/// Serves the HTTP listener `name` (`app` on `listener`, over TLS with
/// `tls`) until `shutdown` fires.
async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<tls::TlsFiles>,
    shutdown: oneshot::Receiver<()>,
    name: &'static str,
) -> Result<(), ServerError> {
    let addr = listener.local_addr().ok();
    if let Some(files) = tls {
        info!(?addr, "{name} HTTPS listening");
        return tls::serve_https(listener, app, files, shutdown, name).await;
    }
    info!(?addr, "{name} HTTP listening");
    // Nagle off here too: S3 API answers are small frames as well (see `no_delay`).
    let listener = axum::serve::ListenerExt::tap_io(listener, move |stream: &mut tokio::net::TcpStream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!("cannot disable Nagle's algorithm on an {name} connection: {e}");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = shutdown.await;
        })
        .await
        .map_err(|source| TransportError::Http { name, source }.into())
}

/// The accepted connections of `listener` with Nagle's algorithm off. A
/// Flight answer is a few small HTTP/2 frames; with Nagle on, the last one
/// waits for the client's delayed ACK (40 ms on Linux), which put a ~45-90 ms
/// floor under every small query and point lookup.
fn no_delay(
    listener: TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static {
    use futures::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|stream| {
            if let Err(e) = stream.set_nodelay(true) {
                tracing::warn!("cannot disable Nagle's algorithm on a Flight connection: {e}");
            }
        })
    })
}
