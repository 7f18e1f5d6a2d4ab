//! Optional bearer-token authentication for every Flight call.

use std::sync::Arc;

use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Rejects calls without `authorization: Bearer <token>` when a token is set.
#[derive(Clone)]
pub struct BearerAuth {
    expected: Option<Arc<str>>,
}

impl BearerAuth {
    pub fn new(token: Option<String>) -> Self {
        BearerAuth {
            expected: token.map(|t| Arc::from(format!("Bearer {t}"))),
        }
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        match given {
            Some(g) if constant_time_eq(g.as_bytes(), expected.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "missing 'authorization: Bearer <token>' header",
            )),
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
