//! Bounded mutation fuzzing of the server's two request surfaces: Flight
//! tickets (`ScanRequest` with its serialized filters, `LookupRequest` with
//! its Arrow IPC keys, statement handles) and raw HTTP requests to the
//! S3-compatible API. Valid requests are mutated (bytes flipped, cut,
//! inserted, repeated); every mutant must get an answer or an error in
//! time — no panic, no hang — and the server must keep serving.
//!
//! The test command runs a few hundred mutants per surface; set
//! `SILT_FUZZ_ITERATIONS` for a longer run, e.g.
//! `SILT_FUZZ_ITERATIONS=20000 cargo test --release -p silt-server --test it fuzz -- --nocapture`.
//! (A mutation fuzzer in the test binary rather than `cargo fuzz`: the
//! surfaces sit on DataFusion and tonic, whose sanitizer builds would add
//! most of an hour to every CI run.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::sql::{ProstMessageExt, TicketStatementQuery};
use datafusion::arrow::array::Int64Array;
use datafusion::logical_expr::{col, lit};
use datafusion_proto::bytes::Serializeable;
use futures::StreamExt;
use prost::Message;
use silt_client::SiltClient;
use silt_proto::{LookupRequest, Projection, ScanRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::Fixture;

/// Mutants per surface: `SILT_FUZZ_ITERATIONS`, else `default`.
fn iterations(default: usize) -> usize {
    std::env::var("SILT_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic source of mutations (xorshift64*), seeded per test so a
/// failure names a reproducible mutant.
struct Mutator(u64);

impl Mutator {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// `seed` with one to four random edits.
    fn mutate(&mut self, seed: &[u8]) -> Vec<u8> {
        let mut out = seed.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(out.len() + 1);
            match self.below(6) {
                0 if !out.is_empty() => {
                    let i = at.min(out.len() - 1);
                    out[i] ^= 1 << self.below(8);
                }
                1 => out.truncate(at),
                2 => {
                    let n = 1 + self.below(16);
                    let bytes: Vec<u8> = (0..n).map(|_| self.next() as u8).collect();
                    out.splice(at..at, bytes);
                }
                3 if !out.is_empty() => {
                    let i = at.min(out.len() - 1);
                    out[i] = [0x00, 0xff, 0x7f, 0x80, b'%', b'/', b'.'][self.below(7)];
                }
                4 => {
                    let end = (at + 1 + self.below(8)).min(out.len());
                    let chunk = out[at.min(end)..end].to_vec();
                    out.splice(at..at, chunk);
                }
                _ => {
                    let end = (at + self.below(8)).min(out.len());
                    out.drain(at.min(end)..end);
                }
            }
        }
        out
    }
}

/// A scan carrying a partial aggregate, as the client plans it for
/// `sql` (which must aggregate one table).
async fn aggregate_scan(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<u8> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let mut found = None;
    plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<silt_client::SiltScanExec>()
            && scan.has_partial_aggregate()
        {
            found = Some(scan.request().as_any().encode_to_vec());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    found.unwrap_or_else(|| panic!("no partial aggregate was pushed for {sql}"))
}

/// Valid tickets of every kind the server takes.
fn ticket_seeds() -> Vec<Vec<u8>> {
    let filter = col("l_quantity").lt(lit(10)).to_bytes().unwrap().to_vec();
    let scan = ScanRequest {
        table: "lineitem".into(),
        projection: Some(Projection {
            columns: vec!["l_orderkey".into(), "l_quantity".into()],
        }),
        filters: vec![filter],
        limit: Some(100),
        partial_aggregate: None,
        ..Default::default()
    };
    let keys = LookupRequest::encode_keys(Arc::new(Int64Array::from(vec![1, 7, 42]))).unwrap();
    let lookup = LookupRequest {
        table: "orders".into(),
        key_column: "o_orderkey".into(),
        keys,
        projection: None,
    };
    let statement = TicketStatementQuery {
        statement_handle: "SELECT count(*) FROM nation WHERE n_regionkey = 1"
            .as_bytes()
            .to_vec()
            .into(),
    };
    vec![
        scan.as_any().encode_to_vec(),
        lookup.as_any().encode_to_vec(),
        statement.as_any().encode_to_vec(),
    ]
}

/// Sends `ticket` and drains the answer; whether it answered (rows or an
/// error) within `limit`.
async fn answered(
    flight: &mut arrow_flight::flight_service_client::FlightServiceClient<tonic::transport::Channel>,
    ticket: Vec<u8>,
    limit: Duration,
) -> bool {
    let call = async {
        match flight.do_get(arrow_flight::Ticket::new(ticket)).await {
            Err(_) => {}
            Ok(stream) => {
                let mut stream = stream.into_inner();
                while let Some(message) = stream.next().await {
                    if message.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::time::timeout(limit, call).await.is_ok()
}

async fn still_served(fx: &Fixture) {
    let client = SiltClient::connect(&fx.server.flight_url()).await.unwrap();
    let b = client.sql("SELECT count(*) FROM region").await.unwrap();
    assert_eq!(b[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_tickets_get_an_answer_and_the_server_carries_on() {
    let fx = Fixture::start().await;
    let channel = tonic::transport::Endpoint::from_shared(fx.server.flight_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flight = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
    let mut seeds = ticket_seeds();
    let ctx = fx.client_ctx().await;
    seeds.push(
        aggregate_scan(
            &ctx,
            "SELECT l_returnflag, sum(l_quantity * 2), avg(l_discount), count(*) FROM lineitem \
             WHERE l_shipdate < DATE '1995-01-01' GROUP BY l_returnflag",
        )
        .await,
    );
    for seed in &seeds {
        assert!(answered(&mut flight, seed.clone(), Duration::from_secs(60)).await);
    }
    let mut m = Mutator(0x5117_F022);
    let n = iterations(300);
    for i in 0..n {
        let ticket = m.mutate(&seeds[i % seeds.len()]);
        assert!(
            answered(&mut flight, ticket.clone(), Duration::from_secs(60)).await,
            "mutant {i} hung: {ticket:?}"
        );
        if i % 100 == 99 {
            still_served(&fx).await;
        }
    }
    still_served(&fx).await;
}

/// Sends `request` raw to `addr`; whether the server answered or closed
/// the connection within `limit`.
async fn http_answered(addr: SocketAddr, request: &[u8], limit: Duration) -> bool {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        if s.write_all(request).await.is_err() {
            return;
        }
        let _ = s.shutdown().await;
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
    };
    tokio::time::timeout(limit, exchange).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_s3_requests_get_an_answer_and_the_server_carries_on() {
    let fx = Fixture::start().await;
    let addr = fx.server.admin_addr.expect("admin listener");
    let seeds: Vec<Vec<u8>> = [
        "GET /s3/lineitem/lineitem.parquet HTTP/1.1\r\nHost: h\r\nRange: bytes=100-5000\r\nConnection: close\r\n\r\n",
        "GET /s3/lineitem?list-type=2&prefix=&max-keys=5&delimiter=%2F HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        "HEAD /s3/orders/orders.parquet HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        "GET /s3/ HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let mut m = Mutator(0x53_F022);
    let n = iterations(300);
    for i in 0..n {
        let request = m.mutate(&seeds[i % seeds.len()]);
        assert!(
            http_answered(addr, &request, Duration::from_secs(30)).await,
            "mutant {i} hung: {:?}",
            String::from_utf8_lossy(&request)
        );
    }
    // The API still serves a good request, and so does Flight.
    let mut ok = Vec::new();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /s3/region/region.parquet HTTP/1.1\r\nHost: h\r\nRange: bytes=0-3\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    s.read_to_end(&mut ok).await.unwrap();
    let text = String::from_utf8_lossy(&ok);
    assert!(text.starts_with("HTTP/1.1 206") && text.ends_with("PAR1"), "{text}");
    still_served(&fx).await;
}
