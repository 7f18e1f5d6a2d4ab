//! Under `validation = "always"`, a client query is validated once per
//! table it reads, not once per scan: its scans carry the query's id
//! ([`silt_proto::QueryContext`]), the server validates all its tables when
//! the first scan arrives, and later scans of the query join those
//! validations. Every new query still validates again.

use crate::common::{Fixture, answer, baseline_ctx, check_same, shared_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_validates_each_table_once_however_many_scans_it_makes() {
    let fx = Fixture::start().await;
    let ctx = fx.client_ctx().await;
    let base = baseline_ctx().await;
    // Nine scans of five tables (the correlated subquery scans four again).
    let q02 = std::fs::read_to_string(shared_dir().join("bench/tpch/queries/q02.sql")).unwrap();
    let expected = answer(&base, &q02).await;
    for run in 0..4 {
        let lists = fx.metric("silt_object_store_list_requests_total");
        let got = answer(&ctx, &q02).await;
        check_same(&format!("q02 run {run}"), &got, &expected, true).unwrap();
        let lists = fx.metric("silt_object_store_list_requests_total") - lists;
        // Every run validates (a new query), and no table twice.
        assert!((1.0..=5.0).contains(&lists), "run {run}: {lists} LISTs for 5 tables");
    }
    assert_eq!(fx.metric("silt_query_errors_total"), 0.0);
}
