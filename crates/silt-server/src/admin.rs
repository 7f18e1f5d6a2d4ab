//! The admin HTTP endpoint: `GET /health`, `GET /metrics`, `GET /stats`, and
//! the S3-compatible read API under `/s3` ([`crate::s3_api`]).
//!
//! All are read-only. State-changing admin calls (none yet) must check
//! the bearer token like the Flight service does.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::engine::Engine;

pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .merge(crate::s3_api::routes(engine.clone()))
        .with_state(engine)
}

async fn health(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let catalog = engine.catalog();
    let unavailable: Vec<&String> = catalog
        .iter()
        .filter(|(_, e)| e.unavailable.is_some())
        .map(|(n, _)| n)
        .collect();
    let body = serde_json::json!({
        "status": "ok",
        "tables": catalog.len(),
        "unavailable": unavailable,
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

async fn metrics(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        engine.metrics().render(),
    )
}

async fn stats(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        crate::stats::stats_json(&engine).to_string(),
    )
}
