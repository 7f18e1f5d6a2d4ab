//! The admin HTTP endpoint: `GET /` (the dashboard), `GET /health`,
//! `GET /metrics`, `GET /stats`, `POST /notify/s3` (S3 event notifications
//! for `notify` tables, [`crate::change_notices::s3_event`]), and the
//! S3-compatible read API under `/s3` ([`crate::s3_api`]).
//!
//! All but `/notify/s3` are read-only, and that one only makes tables
//! validate sooner. With an auth token set, the dashboard, `/metrics`,
//! `/stats` and `/notify/s3` answer only a request that carries it (`authorization: Bearer
//! <token>`, or `?token=<token>` for a browser opening the dashboard, which
//! then gets a session cookie);
//! `/health` stays open for load balancers, the S3 API checks its own
//! SigV4 signatures, and the dashboard's vendored charting library under
//! `/assets` is public code with nothing of the server in it.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::engine::Engine;

/// The dashboard page and the assets it loads, embedded in the binary.
const DASHBOARD_HTML: &str = include_str!("../assets/dashboard.html");
const UPLOT_JS: &str = include_str!("../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot/uPlot.min.css");

/// Who may read the guarded endpoints.
struct AdminAuth {
    /// The server's auth token; `None`: everyone.
    token: Option<String>,
    /// The dashboard's session cookie value: random per server start, so
    /// the cookie is never the token itself (which is also the Flight
    /// bearer token and the S3 API secret).
    session: String,
    /// Cookies get `Secure` when the listener serves TLS.
    secure: bool,
}

pub fn router(engine: Arc<Engine>) -> Router {
    let auth = Arc::new(AdminAuth {
        token: engine.config().auth_token.clone().filter(|t| !t.is_empty()),
        session: format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()),
        secure: engine.config().tls(),
    });
    let page_auth = auth.clone();
    let guarded = Router::new()
        .route("/", get(move |request: Request| dashboard(page_auth.clone(), request)))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .route("/fleet", get(fleet))
        .route("/notify/s3", post(crate::change_notices::s3_event::receive))
        .route_layer(middleware::from_fn_with_state(auth, require_token));
    Router::new()
        .merge(guarded)
        .route("/health", get(health))
        .route("/assets/uPlot.iife.min.js", get(uplot_js))
        .route("/assets/uPlot.min.css", get(uplot_css))
        .merge(crate::s3_api::routes(engine.clone()))
        .with_state(engine)
}

/// Lets a request through when no token is set, or it carries the token
/// or the dashboard's session cookie.
async fn require_token(State(auth): State<Arc<AdminAuth>>, request: Request, next: Next) -> Response {
    let Some(expected) = auth.token.as_deref() else {
        return next.run(request).await;
    };
    if carries_token(request.headers(), request.uri().query(), expected)
        || carries_session(request.headers(), &auth.session)
    {
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
    from_header
        .into_iter()
        .map(str::to_string)
        .chain(from_query)
        .any(|given| crate::auth::constant_time_eq(given.as_bytes(), expected.as_bytes()))
}

/// Whether `headers` carry the dashboard's session cookie `session`.
fn carries_session(headers: &HeaderMap, session: &str) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(name, value)| {
            (name == SESSION_COOKIE || name == SECURE_SESSION_COOKIE)
                && crate::auth::constant_time_eq(value.as_bytes(), session.as_bytes())
        })
}

/// `/health`: 200 `"status": "ok"` while serving, 503 `"status": "draining"`
/// once a drain began ([`crate::drain`]), so load balancers and
/// orchestrators stop sending new work.
async fn health(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let catalog = engine.catalog();
    let unavailable: Vec<&String> = catalog
        .iter()
        .filter(|(_, e)| e.unavailable.is_some())
        .map(|(n, _)| n)
        .collect();
    let drain = engine.drain();
    let (code, status) = if drain.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    };
    let body = serde_json::json!({
        "status": status,
        "tables": catalog.len(),
        "unavailable": unavailable,
        "running": drain.running(),
    });
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string())
}

async fn metrics(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let body = engine
        .off_worker(|e| {
            let mut text = e.metrics().render();
            text.push_str(&crate::table_metrics::render(e));
            text
        })
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok::<_, StatusCode>((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        body,
    ))
}

async fn stats(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let body = engine
        .off_worker(|e| crate::stats::stats_json(e).to_string())
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok::<_, StatusCode>((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body))
}

/// `/fleet`: every `[cluster]` member's state, tiers, hit ratio and queries
/// ([`crate::fleet_view`]).
async fn fleet(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    let body = crate::fleet_view::fleet_json(&engine).await.to_string();
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body)
}

/// The cookie that keeps a browser signed in to the dashboard once it
/// opened `/?token=...` (the page drops the token from its address, so a
/// reload would otherwise be refused). Its value is a random session id of
/// this server's run, never the token; under TLS it is `Secure` and named
/// with the `__Host-` prefix (host-only, path `/`).
const SESSION_COOKIE: &str = "silt_session";
const SECURE_SESSION_COOKIE: &str = "__Host-silt_session";

async fn dashboard(auth: Arc<AdminAuth>, request: Request) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        DASHBOARD_HTML,
    )
        .into_response();
    // Reached only when allowed (see `require_token`): a token given in the
    // query string opens a session.
    let in_query = request
        .uri()
        .query()
        .is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "token"));
    if auth.token.is_some() && in_query {
        let cookie = if auth.secure {
            format!(
                "{SECURE_SESSION_COOKIE}={}; Path=/; Secure; HttpOnly; SameSite=Strict",
                auth.session
            )
        } else {
            format!("{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", auth.session)
        };
        if let Ok(value) = cookie.parse() {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
    }
    response
}

async fn uplot_js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/javascript")], UPLOT_JS)
}

async fn uplot_css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css")], UPLOT_CSS)
}
