//! The stages a query's server-side time is split into ([`super::trace`]
//! has what each counts). A leaf: the trace, the query log and the metrics
//! all name stages, and none of them needs the others to do so.

use tracing::Span;

/// A stage of a query's server-side time (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Validation,
    Planning,
    Scan,
    Encode,
    Send,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Validation,
        Stage::Planning,
        Stage::Scan,
        Stage::Encode,
        Stage::Send,
    ];

    /// The `stage` label value and span name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Validation => "validation",
            Stage::Planning => "planning",
            Stage::Scan => "scan",
            Stage::Encode => "encode",
            Stage::Send => "send",
        }
    }

    /// This stage's span, a child of the query's.
    pub(crate) fn span(self, parent: &Span) -> Span {
        match self {
            Stage::Validation => tracing::info_span!(target: "silt::query", parent: parent, "validation"),
            Stage::Planning => tracing::info_span!(target: "silt::query", parent: parent, "planning"),
            Stage::Scan => tracing::info_span!(target: "silt::query", parent: parent, "scan"),
            Stage::Encode => tracing::info_span!(target: "silt::query", parent: parent, "encode"),
            Stage::Send => tracing::info_span!(target: "silt::query", parent: parent, "send"),
        }
    }
}
