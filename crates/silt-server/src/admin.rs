//! The admin HTTP endpoint: `GET /` (the dashboard), `GET /health`,
//! `GET /metrics`, `GET /stats`, and the S3-compatible read API under `/s3`
//! ([`crate::s3_api`]).
//!
//! All are read-only. With an auth token set, the dashboard, `/metrics` and
//! `/stats` answer only a request that carries it (`authorization: Bearer
//! <token>`, or `?token=<token>` for a browser opening the dashboard, which
//! then keeps it in an HttpOnly cookie);
//! `/health` stays open for load balancers, the S3 API checks its own
//! SigV4 signatures, and the dashboard's vendored charting library under
//! `/assets` is public code with nothing of the server in it.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::engine::Engine;

/// The dashboard page and the assets it loads, embedded in the binary.
const DASHBOARD_HTML: &str = include_str!("../assets/dashboard.html");
const UPLOT_JS: &str = include_str!("../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot/uPlot.min.css");

pub fn router(engine: Arc<Engine>) -> Router {
    let token = engine.config().auth_token.clone().filter(|t| !t.is_empty());
    let guarded = Router::new()
        .route("/", get(dashboard))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .route_layer(middleware::from_fn_with_state(Arc::new(token), require_token));
    Router::new()
        .merge(guarded)
        .route("/health", get(health))
        .route("/assets/uPlot.iife.min.js", get(uplot_js))
        .route("/assets/uPlot.min.css", get(uplot_css))
        .merge(crate::s3_api::routes(engine.clone()))
        .with_state(engine)
}

/// Lets a request through when no token is set or it carries the token.
async fn require_token(State(token): State<Arc<Option<String>>>, request: Request, next: Next) -> Response {
    let Some(expected) = token.as_deref() else {
        return next.run(request).await;
    };
    if carries_token(request.headers(), request.uri().query(), expected) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this endpoint needs the server's auth token: 'authorization: Bearer <token>' (or ?token=<token> in a browser)\n",
    )
        .into_response()
}

/// Whether `headers` or the query string `query` carry `expected`
/// (compared in constant time).
fn carries_token(headers: &HeaderMap, query: Option<&str>, expected: &str) -> bool {
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let from_query = query.and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
    });
    let from_cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(&format!("{TOKEN_COOKIE}=")))
        .map(|v| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned())
        .collect::<Vec<_>>();
    from_header
        .into_iter()
        .map(str::to_string)
        .chain(from_query)
        .chain(from_cookie)
        .any(|given| crate::auth::constant_time_eq(given.as_bytes(), expected.as_bytes()))
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

/// Runs `f` on a blocking thread: rendering every metric and walking the
/// tiers is no work for an async worker, which would stall queries.
async fn off_worker(engine: Arc<Engine>, f: fn(&Engine) -> String) -> Result<String, StatusCode> {
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

async fn metrics(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let body = off_worker(engine, |e| {
        let mut text = e.metrics().render();
        text.push_str(&crate::table_metrics::render(e));
        text
    })
    .await?;
    Ok::<_, StatusCode>((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        body,
    ))
}

async fn stats(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let body = crate::stats::stats_json_off_worker(engine)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok::<_, StatusCode>((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body))
}

/// The cookie that keeps a browser signed in to the dashboard once it
/// opened `/?token=...` (the page drops the token from its address, so a
/// reload would otherwise be refused).
const TOKEN_COOKIE: &str = "silt_token";

async fn dashboard(State(engine): State<Arc<Engine>>, request: Request) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        DASHBOARD_HTML,
    )
        .into_response();
    // Reached only with a valid token (see `require_token`): one given in
    // the query string is kept as an HttpOnly, same-site cookie.
    let token = engine.config().auth_token.clone().filter(|t| !t.is_empty());
    let in_query = request
        .uri()
        .query()
        .is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "token"));
    if let Some(token) = token
        && in_query
        && let Ok(cookie) = format!(
            "{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            percent_encoding::utf8_percent_encode(&token, percent_encoding::NON_ALPHANUMERIC)
        )
        .parse()
    {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn uplot_js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/javascript")], UPLOT_JS)
}

async fn uplot_css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css")], UPLOT_CSS)
}
