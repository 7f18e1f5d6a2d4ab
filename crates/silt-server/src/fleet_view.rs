//! The fleet as any member sees it: every member of `[cluster] servers`
//! (as they are now, [`crate::cluster`]) with its state, tiers, hit ratio and queries, for the dashboard's Fleet
//! card (`GET /fleet`), the `silt.fleet` Flight action and `silt stats` of
//! one member.
//!
//! This member answers from its own statistics; each other member is asked
//! for its `silt.stats` over Flight (with this server's token, and for
//! `https://` members trusting `cluster.ca_cert`, else this server's own
//! certificate), all at once, each within [`PEER_TIMEOUT`]. A member that
//! does not answer is listed as `down` with the error. Peers are asked for
//! their own statistics only, never for their fleet view, so a view costs
//! one call per member.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::Action;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::TryStreamExt;
use serde_json::{Value, json};
use silt_proto::ACTION_STATS;

use crate::engine::Engine;

/// How long a peer has to answer with its statistics.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(3);

/// Every member's summary (this server's alone when it has no `[cluster]`):
/// `{"members": [{url, self, state, tiers, hit_ratio, queries, error?}]}`.
pub async fn fleet_json(engine: &Arc<Engine>) -> Value {
    let members = engine.cluster().map(|c| c.members());
    let Some((members, me)) = members.as_ref().and_then(|m| Some((&m.servers, m.me?))) else {
        let own = crate::stats::stats_json(engine);
        return json!({"members": [summary("self", true, &own)]});
    };
    let members = members.iter().enumerate().map(|(i, url)| async move {
        let url = url.clone();
        if i == me {
            return summary(&url, true, &crate::stats::stats_json(engine));
        }
        match tokio::time::timeout(PEER_TIMEOUT, peer_stats(engine, &url)).await {
            Ok(Ok(stats)) => summary(&url, false, &stats),
            Ok(Err(e)) => down(&url, &e),
            Err(_) => down(&url, &format!("no answer within {PEER_TIMEOUT:?}")),
        }
    });
    json!({"members": futures::future::join_all(members).await})
}

fn down(url: &str, error: &str) -> Value {
    json!({"url": url, "self": false, "state": "down", "error": error})
}

/// The summary of one member's `silt.stats` answer.
fn summary(url: &str, me: bool, stats: &Value) -> Value {
    let metric = |name: &str| stats["metrics"][name].as_f64().unwrap_or(0.0);
    let tier = |name: &str| {
        let t = &stats["tiers"][name];
        json!({
            "bytes": t["bytes"],
            "budget": t["budget"],
            "hits": t["hits"],
            "misses": t["misses"],
        })
    };
    let count = |name: &str, field: &str| stats["tiers"][name][field].as_u64().unwrap_or(0);
    let (hits, misses) = ["memory", "disk"]
        .iter()
        .fold((0, 0), |(h, m), t| (h + count(t, "hits"), m + count(t, "misses")));
    let hit_ratio = silt_cache::hit_ratio(hits, misses);
    json!({
        "url": url,
        "self": me,
        "state": stats["state"].as_str().unwrap_or("serving"),
        "tiers": {
            "metadata": tier("metadata"),
            "memory": tier("memory"),
            "disk": tier("disk"),
        },
        "hit_ratio": hit_ratio,
        "queries": {
            "total": metric("silt_queries_total"),
            "running": metric("silt_queries_active"),
            "errors": metric("silt_query_errors_total"),
        },
    })
}

/// A peer's `silt.stats`, over Flight.
async fn peer_stats(engine: &Engine, url: &str) -> Result<Value, String> {
    let config = engine.config();
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("{url}: {e}"))?
        .connect_timeout(PEER_TIMEOUT);
    if url.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        let ca = config.cluster.ca_cert.as_ref().or(config.tls_cert.as_ref());
        if let Some(path) = ca {
            let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls).map_err(|e| format!("{url}: {e}"))?;
    }
    let channel = endpoint.connect().await.map_err(|e| format!("{url}: {e}"))?;
    let mut client = FlightServiceClient::new(channel);
    let mut request = tonic::Request::new(Action {
        r#type: ACTION_STATS.to_string(),
        body: Vec::new().into(),
    });
    if let Some(token) = config.auth_token.as_deref().filter(|t| !t.is_empty()) {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the auth token is not a valid header value".to_string())?;
        request.metadata_mut().insert("authorization", value);
    }
    let results: Vec<arrow_flight::Result> = client
        .do_action(request)
        .await
        .map_err(|s| format!("{url}: {}", s.message()))?
        .into_inner()
        .try_collect()
        .await
        .map_err(|s| format!("{url}: {}", s.message()))?;
    let body = results.first().ok_or_else(|| format!("{url}: no statistics"))?;
    serde_json::from_slice(&body.body).map_err(|e| format!("{url}: malformed statistics: {e}"))
}
