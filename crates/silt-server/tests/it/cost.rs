//! The calibrated cost model's inputs and outputs against a real server:
//! the server's report of what a pushed-down scan spent (after its last
//! batch, only when asked), compressed answers, and the per-path metrics
//! `EXPLAIN ANALYZE` shows for a client with a compute-side cache.

use std::sync::Arc;

use arrow_flight::Ticket;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder, FlightRecordBatchStream};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::ProstMessageExt;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use prost::Message;
use silt_bench::compare::check_same;
use silt_client::path_cost::{DEFAULT_LINK_BYTES_PER_SECOND, Estimates};
use silt_client::{SiltClient, SiltTableOptions};
use silt_proto::{IpcCompression, Projection, ScanReport, ScanRequest};

use crate::common::Fixture;
use crate::hybrid::run_with_plan;

/// A scan of lineitem's text columns, `l_quantity < 30` (about 60% of rows).
fn lineitem_scan(compression: IpcCompression) -> ScanRequest {
    ScanRequest {
        table: "lineitem".into(),
        projection: Some(Projection {
            columns: vec!["l_orderkey".into(), "l_comment".into(), "l_shipinstruct".into()],
        }),
        filter_sql: Some("l_quantity < 30".into()),
        compression: compression as i32,
        ..Default::default()
    }
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// A plain Flight client of `fx`'s server.
async fn flight_client(fx: &Fixture) -> FlightServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(fx.server.flight_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightServiceClient::new(channel)
}

/// The raw Flight messages of `scan`'s `DoGet`, as any Flight client gets them.
async fn raw_messages(fx: &Fixture, scan: &ScanRequest) -> Vec<arrow_flight::decode::DecodedFlightData> {
    let mut flight = flight_client(fx).await;
    let ticket = Ticket::new(scan.as_any().encode_to_vec());
    let data = flight.do_get(ticket).await.unwrap().into_inner();
    FlightDataDecoder::new(data.map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s))))
        .try_collect()
        .await
        .unwrap()
}

/// The server's report arrives after the last batch when asked, agrees with
/// what came (rows, bytes), and says what the scan read; a request that
/// does not ask gets no extra message, and a plain Flight decoder reads an
/// answer with a report like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_reports_what_the_server_spent() {
    let fx = Fixture::start().await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let scan = lineitem_scan(IpcCompression::None);
    let (_, table_rows) = client
        .scan_info(&ScanRequest {
            table: "lineitem".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let table_rows = table_rows.expect("lineitem's row count") as u64;

    for run in ["cold", "warm"] {
        let (batches, transfer) = client.scan_all_measured(&scan).await.unwrap();
        let report = transfer.report.clone().expect("the server's report");
        assert_eq!(report.version, silt_proto::SCAN_REPORT_VERSION);
        assert_eq!(report.rows_sent, rows(&batches) as u64, "{run}");
        assert!(
            report.rows_sent > 0 && report.rows_sent < table_rows,
            "{run}: {report:?}"
        );
        // The filter reads every row group: all of the table's rows were scanned.
        assert_eq!(report.rows_scanned, table_rows, "{run}: {report:?}");
        assert!(report.bytes_scanned > 0, "{run}: {report:?}");
        // The client received exactly the Flight data the server counted as sent.
        assert_eq!(transfer.bytes_received, report.bytes_sent, "{run}: {report:?}");
        assert!(
            report.arrow_bytes_sent > 0 && report.scan_seconds > 0.0,
            "{run}: {report:?}"
        );
        assert!(report.first_message_seconds > 0.0, "{run}: {report:?}");
        let first = transfer.first_message.expect("a first message");
        assert!(first <= transfer.elapsed, "{run}: {transfer:?}");
        assert_eq!(report.compression, IpcCompression::None as i32);
    }
    // The client learned the round trip and the server's scan rate.
    let samples = client.calibration().samples();
    assert_eq!(samples.round_trip, 2, "{samples:?}");
    assert_eq!(samples.server_scan, 2, "{samples:?}");

    // Not asked: no message beyond the schema and the batches.
    let plain = raw_messages(&fx, &scan).await;
    assert!(plain.iter().all(|m| m.app_metadata().is_empty()));
    assert!(!plain.iter().any(|m| matches!(m.payload, DecodedPayload::None)));
    // Asked: one more message, last, carrying the report.
    let asked = ScanRequest {
        report: true,
        ..scan.clone()
    };
    let messages = raw_messages(&fx, &asked).await;
    let reports = messages
        .iter()
        .filter(|m| matches!(m.payload, DecodedPayload::None))
        .count();
    assert_eq!(reports, 1);
    let last = messages.last().unwrap();
    assert!(matches!(last.payload, DecodedPayload::None));
    let report = ScanReport::from_app_metadata(&last.app_metadata())
        .unwrap()
        .expect("a report");
    let sent: usize = messages
        .iter()
        .map(|m| match &m.payload {
            DecodedPayload::RecordBatch(b) => b.num_rows(),
            _ => 0,
        })
        .sum();
    assert_eq!(report.rows_sent, sent as u64);
    // Arrow Flight's own record batch decoder passes over the report.
    let mut flight = flight_client(&fx).await;
    let data = flight
        .do_get(Ticket::new(asked.as_any().encode_to_vec()))
        .await
        .unwrap()
        .into_inner();
    let decoded: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(
        data.map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s))),
    )
    .try_collect()
    .await
    .unwrap();
    assert_eq!(rows(&decoded), sent);
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}

/// A scan asking for compressed IPC buffers returns exactly the rows of one
/// that does not, in fewer bytes on the link, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_answer_has_the_same_rows_in_fewer_bytes() {
    let fx = Fixture::start().await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let (plain, plain_transfer) = client
        .scan_all_measured(&lineitem_scan(IpcCompression::None))
        .await
        .unwrap();
    let plain_report = plain_transfer.report.expect("a report");
    for codec in [IpcCompression::Lz4Frame, IpcCompression::Zstd] {
        let (got, transfer) = client.scan_all_measured(&lineitem_scan(codec)).await.unwrap();
        check_same(&format!("{codec:?}"), &got, &plain, false).unwrap();
        let report = transfer.report.expect("a report");
        assert_eq!(report.compression, codec as i32);
        assert_eq!(report.rows_sent, plain_report.rows_sent);
        let shown = format!("{codec:?}: {report:?}, plain {plain_report:?}");
        assert!(report.bytes_sent < plain_report.bytes_sent, "{shown}");
        // Measured against the batches' own Arrow bytes too (their buffers
        // may differ between runs as the server's memory tier warms).
        assert!(report.bytes_sent < report.arrow_bytes_sent, "{shown}");
        let ratio = |r: &ScanReport| r.bytes_sent as f64 / r.arrow_bytes_sent as f64;
        assert!(ratio(&report) < ratio(&plain_report), "{shown}");
        assert_eq!(transfer.bytes_received, report.bytes_sent);
        // The client learned the codec's ratio from it.
        let learned = client.calibration().estimates();
        let (prior, now) = match codec {
            IpcCompression::Zstd => (silt_client::path_cost::ZSTD.ratio, learned.zstd_ratio),
            _ => (silt_client::path_cost::LZ4.ratio, learned.lz4_ratio),
        };
        let alpha = silt_client::path_cost::ALPHA;
        assert!(
            (now - ((1.0 - alpha) * prior + alpha * ratio(&report))).abs() < 1e-9,
            "{shown}"
        );
    }
    assert_eq!(client.calibration().samples().compression_ratio, 2);
}

/// Sum of metric `name` over the nodes of `plan` (after it ran): a count,
/// or a time in nanoseconds. (Summed here: DataFusion's own sum of times
/// adds at least a nanosecond per metric.)
fn metric(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let mut sum = 0;
    plan.apply(|node| {
        for m in node.metrics().iter().flat_map(|m| m.iter()) {
            if m.value().name() == name {
                sum += m.value().as_usize();
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    sum
}

/// Every path a scan's row groups took shows the bytes it moved and the
/// model's estimate against the time it took; a path no row group took
/// shows none of it.
fn check_paths(plan: &Arc<dyn ExecutionPlan>, sql: &str) -> Vec<&'static str> {
    let mut taken = Vec::new();
    for (path, counter) in [
        ("local", "row_groups_local"),
        ("fetched", "row_groups_fetched"),
        ("hybrid", "row_groups_hybrid"),
        ("pushdown", "row_groups_pushed"),
    ] {
        let groups = metric(plan, counter);
        let bytes = metric(plan, &format!("{path}_bytes"));
        let estimated = metric(plan, &format!("{path}_estimated_time"));
        let elapsed = metric(plan, &format!("{path}_elapsed_time"));
        let shown =
            format!("{sql}: {path}: {groups} row groups, {bytes} bytes, {estimated} ns estimated, {elapsed} ns");
        if groups == 0 {
            assert_eq!((bytes, estimated, elapsed), (0, 0, 0), "{shown}");
            continue;
        }
        taken.push(path);
        assert!(estimated > 0 && elapsed > 0, "{shown}");
        if path == "local" {
            assert_eq!(bytes, 0, "{shown}: nothing moves for local row groups");
        } else {
            assert!(bytes > 0, "{shown}");
        }
    }
    taken
}

/// `EXPLAIN ANALYZE` of a scan through a client with a compute-side cache
/// shows per path the row groups, the bytes moved and the estimated against
/// the measured time, consistent with each other, over the runs that take
/// each path: pushed, fetched, local, then hybrid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_each_paths_bytes_and_estimated_time() {
    let fx = Fixture::start().await;
    let base = crate::common::baseline_ctx().await;
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    // The path choices of the priors' model (which takes each path over
    // these runs), whatever this machine measures; learning goes on.
    client
        .calibration()
        .pin(Some(Estimates::priors(DEFAULT_LINK_BYTES_PER_SECOND)));
    let ctx = SessionContext::new();
    let options = SiltTableOptions {
        local_cache_bytes: 1 << 30,
        ..Default::default()
    };
    silt_client::register_tables_with_options(&ctx, &client, &options)
        .await
        .unwrap();
    let warm = "SELECT l_comment, l_orderkey FROM lineitem WHERE l_quantity < 40";
    let mut paths = Vec::new();
    for expected in ["pushdown", "fetched", "local"] {
        let (got, plan) = run_with_plan(&ctx, warm).await;
        check_same(warm, &got, &crate::common::answer(&base, warm).await, false).unwrap();
        let taken = check_paths(&plan, warm);
        assert!(taken.contains(&expected), "{warm}: {taken:?}, expected {expected}");
        paths.extend(taken);
    }
    // One more projected column, not cached: filtered here, its surviving rows fetched.
    let hybrid = "SELECT l_comment, l_shipinstruct, l_orderkey FROM lineitem WHERE l_quantity < 40";
    let (got, plan) = run_with_plan(&ctx, hybrid).await;
    check_same(hybrid, &got, &crate::common::answer(&base, hybrid).await, false).unwrap();
    let taken = check_paths(&plan, hybrid);
    assert!(taken.contains(&"hybrid"), "{taken:?}");

    // The text of EXPLAIN ANALYZE names them.
    let text = ctx
        .sql(&format!("EXPLAIN ANALYZE {warm}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&text)
        .unwrap()
        .to_string();
    for name in [
        "local_bytes=",
        "local_estimated_time=",
        "local_elapsed_time=",
        "pushdown_bytes=",
    ] {
        assert!(text.contains(name), "{name} in {text}");
    }
    // The client learned from its transfers and from its own local runs.
    let samples = client.calibration().samples();
    assert!(samples.round_trip > 0 && samples.client_scan > 0, "{samples:?}");
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}
