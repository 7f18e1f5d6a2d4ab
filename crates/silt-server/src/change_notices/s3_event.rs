//! `POST /notify/s3`: S3 event notifications (the JSON that S3, MinIO and
//! Ceph RGW send: `{"Records":[{"eventName":…,"s3":{"bucket":{"name":…},
//! "object":{"key":…}}}]}`) mark the `notify` tables whose location covers
//! a record's bucket and key changed.
//!
//! Behind the admin listener's auth token, like `/metrics` (see
//! [`crate::admin`]). Without a token configured the endpoint is as open
//! as the rest of the admin listener; a notice can only make a table
//! validate sooner (one LIST), never put data in it, so the worst a forged
//! notice does is cost a round trip.
//!
//! Every record marks, whatever its `eventName` (created, removed,
//! restored, expired…): an unneeded LIST is cheap, a missed change is not.
//! The test event S3 and MinIO send when a notification is configured
//! (`{"Event":"s3:TestEvent",…}`) is accepted and marks nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use silt_cache::Freshness;
use silt_store::TableLocation;
use tracing::debug;

use crate::config::TableConfig;
use crate::engine::Engine;

/// Why a posted body is not an S3 event notification (a 400).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("not an S3 event notification: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("not an S3 event notification: expected {{\"Records\": [...]}} (or an s3:TestEvent), found neither")]
    NoRecords,
    #[error("record {index}: object key {key:?} is not URL-encoded UTF-8")]
    BadKey { index: usize, key: String },
}

/// One object a notification says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedObject {
    pub bucket: String,
    /// The key, URL-decoded (S3 sends it form-encoded: `+` for a space).
    pub key: String,
}

#[derive(Deserialize)]
struct Notification {
    #[serde(rename = "Records")]
    records: Option<Vec<Record>>,
    /// `s3:TestEvent` on a test notification (no records).
    #[serde(rename = "Event")]
    event: Option<String>,
}

#[derive(Deserialize)]
struct Record {
    s3: Entity,
}

#[derive(Deserialize)]
struct Entity {
    bucket: Bucket,
    object: Object,
}

#[derive(Deserialize)]
struct Bucket {
    name: String,
}

#[derive(Deserialize)]
struct Object {
    key: String,
}

/// The objects `body` (an S3 event notification) names; none for a test
/// event.
pub fn parse(body: &[u8]) -> Result<Vec<ChangedObject>, EventError> {
    let notification: Notification = serde_json::from_slice(body)?;
    let Some(records) = notification.records else {
        return match notification.event.as_deref() {
            Some("s3:TestEvent") => Ok(Vec::new()),
            _ => Err(EventError::NoRecords),
        };
    };
    records
        .into_iter()
        .enumerate()
        .map(|(index, r)| {
            let key = decode_key(&r.s3.object.key).ok_or_else(|| EventError::BadKey {
                index,
                key: r.s3.object.key.clone(),
            })?;
            Ok(ChangedObject {
                bucket: r.s3.bucket.name,
                key,
            })
        })
        .collect()
}

/// An event's object key as stored: form-encoded, `+` for a space and
/// `%XX` for other bytes (a literal `+` arrives as `%2B`).
fn decode_key(key: &str) -> Option<String> {
    let spaced = key.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|k| k.into_owned())
}

/// Whether table `location` (on S3) holds or may list `object`.
fn covers(location: &TableLocation, object: &ChangedObject) -> bool {
    if !matches!(location.url.scheme(), "s3" | "s3a") || location.url.host_str() != Some(object.bucket.as_str()) {
        return false;
    }
    let path = location.path.as_str();
    if !location.is_prefix {
        return object.key == path;
    }
    path.is_empty() || object.key.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'))
}

/// The `notify` tables among `tables` that cover any of `objects`.
fn tables_covering<'a>(
    tables: impl IntoIterator<Item = (&'a String, &'a TableConfig)>,
    objects: &[ChangedObject],
) -> BTreeSet<String> {
    tables
        .into_iter()
        .filter(|(_, t)| matches!(t.validation, Freshness::Notify { .. }))
        .filter_map(|(name, t)| Some((name, TableLocation::parse(&t.url).ok()?)))
        .filter(|(_, location)| objects.iter().any(|o| covers(location, o)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `POST /notify/s3`: marks the tables the posted notification names;
/// answers `{"records": N, "tables": [...]}` (the tables marked), or 400
/// with what is wrong with the body.
pub async fn receive(State(engine): State<Arc<Engine>>, body: Bytes) -> Response {
    let objects = match parse(&body) {
        Ok(objects) => objects,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    engine.metrics().notices_s3_event.increment(objects.len() as u64);
    let tables: Vec<String> = tables_covering(&engine.config().tables, &objects)
        .into_iter()
        .filter(|t| engine.note_change(t))
        .collect();
    debug!(records = objects.len(), ?tables, "S3 event notification");
    let body = serde_json::json!({ "records": objects.len(), "tables": tables });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A notification as S3 sends it (MinIO and Ceph send the same shape;
    /// MinIO prefixes `eventName` with `s3:` and adds top-level fields).
    const PUT: &str = r#"{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",
        "eventTime":"2024-01-01T00:00:00.000Z","eventName":"ObjectCreated:Put",
        "userIdentity":{"principalId":"AWS:X"},"requestParameters":{"sourceIPAddress":"10.0.0.1"},
        "responseElements":{"x-amz-request-id":"R"},
        "s3":{"s3SchemaVersion":"1.0","configurationId":"silt","bucket":{"name":"lake","arn":"arn:aws:s3:::lake"},
        "object":{"key":"sales/day%3D1/my+part%2B1.parquet","size":1024,"eTag":"abc","sequencer":"0A"}}}]}"#;

    #[test]
    fn parses_records_and_decodes_keys() {
        let objects = parse(PUT.as_bytes()).unwrap();
        assert_eq!(
            objects,
            vec![ChangedObject {
                bucket: "lake".into(),
                key: "sales/day=1/my part+1.parquet".into(),
            }]
        );
        let minio = r#"{"EventName":"s3:ObjectRemoved:Delete","Key":"lake/a.parquet","Records":[
            {"eventName":"s3:ObjectRemoved:Delete","s3":{"bucket":{"name":"lake"},"object":{"key":"a.parquet"}}}]}"#;
        assert_eq!(parse(minio.as_bytes()).unwrap()[0].key, "a.parquet");
    }

    #[test]
    fn a_test_event_is_accepted_and_names_nothing() {
        let test = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2024-01-01T00:00:00.000Z",
            "Bucket":"lake","RequestId":"R","HostId":"H"}"#;
        assert_eq!(parse(test.as_bytes()).unwrap(), vec![]);
        assert_eq!(parse(br#"{"Records":[]}"#).unwrap(), vec![]);
    }

    #[test]
    fn malformed_bodies_are_refused_with_a_reason() {
        for (body, says) in [
            (&b"not json"[..], "not an S3 event notification"),
            (b"[1,2]", "not an S3 event notification"),
            (b"{}", "expected {\"Records\""),
            (br#"{"Event":"s3:Other"}"#, "expected {\"Records\""),
            (
                br#"{"Records":[{"s3":{"bucket":{"name":"b"}}}]}"#,
                "missing field `object`",
            ),
            (
                br#"{"Records":[{"s3":{"bucket":{"name":"b"},"object":{"key":7}}}]}"#,
                "invalid type",
            ),
            (
                br#"{"Records":[{"s3":{"bucket":{"name":"b"},"object":{"key":"%FF"}}}]}"#,
                "record 0",
            ),
        ] {
            let e = parse(body).unwrap_err().to_string();
            assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn a_record_marks_the_notify_tables_that_cover_its_key() {
        let table = |url: &str, validation| TableConfig {
            url: url.into(),
            validation,
            ..Default::default()
        };
        let tables: std::collections::BTreeMap<String, TableConfig> = [
            ("folder", table("s3://lake/sales/", Freshness::NOTIFY)),
            ("other_folder", table("s3://lake/sales2/", Freshness::NOTIFY)),
            (
                "one",
                table("s3://lake/sales/day=1/my part+1.parquet", Freshness::NOTIFY),
            ),
            ("bucket", table("s3://lake/", Freshness::NOTIFY)),
            ("other_bucket", table("s3://pond/sales/", Freshness::NOTIFY)),
            ("always", table("s3://lake/sales/", Freshness::Always)),
            ("local", table("file:///lake/sales/", Freshness::NOTIFY)),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
        let objects = parse(PUT.as_bytes()).unwrap();
        let marked: Vec<String> = tables_covering(&tables, &objects).into_iter().collect();
        assert_eq!(marked, ["bucket", "folder", "one"]);
    }
}
