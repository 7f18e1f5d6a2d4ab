//! The pushdown route: the whole scan runs on the server (filters, join
//! filters, limit, any partial aggregate) and its rows stream back, as
//! Arrow IPC, compressed when the model says the link is slower than
//! compressing ([`with_compression`]). The route of a session without a
//! compute-side cache and of a scan with a limit; the hybrid route pushes
//! its pushed row groups, and whole scans, through [`server_scan`] too.

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use futures::StreamExt;
use futures::stream::BoxStream;
use silt_proto::ScanRequest;

use super::metrics::PathMetrics;
use super::{Scan, ScanRoute, adapt};
use crate::client::{ClientError, SiltClient};

/// The scan pushed down whole to `client`'s server.
#[derive(Debug)]
pub struct PushdownRoute {
    pub client: SiltClient,
}

#[async_trait]
impl ScanRoute for PushdownRoute {
    async fn open(&self, scan: Scan) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        Ok(push_whole(&self.client, &scan.request, &scan.out, &scan.counters.pushdown_cost).await?)
    }
}

/// `request` run whole on the server, compressed as the model says, its
/// cost counted in `cost` (the pushdown path's metrics).
pub(crate) async fn push_whole(
    client: &SiltClient,
    request: &ScanRequest,
    out: &SchemaRef,
    cost: &PathMetrics,
) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, ClientError> {
    let request = with_compression(client, request, None);
    server_scan(client, &request, out, Some(cost)).await
}

/// Runs `request` on the server and streams its batches in `out`, the
/// schema the client planned with. When the answer ends, `cost` (a path's
/// `EXPLAIN ANALYZE` metrics) gets the bytes it moved and its wall time.
pub(crate) async fn server_scan(
    client: &SiltClient,
    request: &ScanRequest,
    out: &SchemaRef,
    cost: Option<&PathMetrics>,
) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, ClientError> {
    let started = std::time::Instant::now();
    let stream = client.scan(request).await?;
    let transfer = stream.transfer_handle();
    let (client, table, out) = (client.clone(), request.table.clone(), out.clone());
    let batches = stream.map(move |r| {
        r.map_err(|e| DataFusionError::from(client.scan_error(&table, e)))
            .and_then(|b| adapt(b, &out))
    });
    let Some(cost) = cost.cloned() else {
        return Ok(batches.boxed());
    };
    let measured = futures::stream::once(async move {
        let (bytes, scanned) = transfer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or((0, 0), |t| {
                (t.bytes_received, t.report.as_ref().map_or(0, |r| r.bytes_scanned))
            });
        cost.measured(started.elapsed(), bytes, scanned);
    })
    .filter_map(|()| async { None });
    Ok(batches.chain(measured).boxed())
}

/// `request` with the compression its answer of about `expected_bytes`
/// (`None`: unknown) should come with, by the model of `client`'s server
/// ([`crate::path_cost::Estimates::compression`]), unless it names one.
pub(crate) fn with_compression(client: &SiltClient, request: &ScanRequest, expected_bytes: Option<f64>) -> ScanRequest {
    let mut request = request.clone();
    if request.compression == 0 {
        request.compression = client.calibration().estimates().compression(expected_bytes) as i32;
    }
    request
}
