//! The process's tracing subscriber: logs to stderr (text, or one JSON
//! object per line with `--log-format json`) filtered by `SILT_LOG`, and,
//! for `silt serve --otlp-endpoint URL`, OpenTelemetry spans exported over
//! OTLP/HTTP (protobuf) to `URL/v1/traces`.
//!
//! The exported spans are the server's own, whatever `SILT_LOG` says: each
//! query (`query`, with its kind, text and id), its stages (`validation`,
//! `planning`, `scan`, `encode`, `send`), each row group a scan reads
//! (`row_group`), each read through the cache tiers (`tier_read`, with its
//! page hits and misses) and each object-store request (`store_request`).
//! A query's span records its OpenTelemetry trace id as `trace_id`, so every
//! log line inside a query names the trace to look up.

use std::str::FromStr;

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (fields, span fields, the trace id).
    Json,
}

/// The spans exported over OTLP: Silt's, at info level.
const EXPORTED: &str = "silt=info,silt_server=info,silt_scan=info,silt_cache=info,silt_store=info";

/// Keeps the exporter alive; dropping it flushes the spans still queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("silt: flushing traces: {e}");
        }
    }
}

fn log_filter() -> EnvFilter {
    EnvFilter::try_from_env("SILT_LOG")
        // s3s logs every refused S3 request (a 404, a bad signature) as an
        // error; the S3 API logs store failures itself.
        .unwrap_or_else(|_| EnvFilter::new("warn,s3s=off"))
}

/// Installs the subscriber. With `otlp_endpoint`, spans go to that
/// collector (batched on a background thread).
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(log_filter())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(log_filter())
            .boxed(),
    };
    let (traces, provider) = match otlp_endpoint {
        Some(endpoint) => {
            let provider = provider(endpoint)?;
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("silt"))
                .with_filter(EnvFilter::from_str(EXPORTED).context("span filter")?);
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .context("installing the tracing subscriber")?;
    Ok(Telemetry { provider })
}

/// An OTLP/HTTP span exporter to `endpoint` (`http://host:4318`; the
/// `/v1/traces` path is added), batched.
fn provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&url)
        .build()
        .with_context(|| format!("OTLP exporter to {url}"))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("silt").build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
