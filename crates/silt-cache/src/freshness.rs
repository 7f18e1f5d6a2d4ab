//! How often a table's objects are revalidated against the object store.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Per-table validation mode (DESIGN.md, "Freshness").
///
/// Validation means asking the store for the current version of the objects
/// (a LIST for a folder or prefix table, a HEAD for a one-object table).
/// Cached bytes are keyed by version, so validation decides which version a
/// query reads; it never lets bytes of two versions mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Freshness {
    /// Revalidate on every query (the default): an overwritten object is seen
    /// by the next query.
    #[default]
    Always,
    /// Trust a validation for this long; an overwrite is seen at most this
    /// much later.
    Ttl(Duration),
    /// Objects never change once written (Iceberg/Delta data files): validate
    /// once, then never again while the server runs.
    Immutable,
}

impl Freshness {
    /// Whether a validation made `age` ago still holds.
    pub fn still_valid(self, age: Duration) -> bool {
        match self {
            Freshness::Always => false,
            Freshness::Ttl(ttl) => age < ttl,
            Freshness::Immutable => true,
        }
    }
}

impl fmt::Display for Freshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Freshness::Always => f.write_str("always"),
            Freshness::Ttl(d) => write!(f, "ttl={}", humantime::format_duration(*d)),
            Freshness::Immutable => f.write_str("immutable"),
        }
    }
}

impl FromStr for Freshness {
    type Err = String;

    /// `always`, `immutable` or `ttl=DURATION` (e.g. `ttl=30s`, `ttl=5m`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "always" => Ok(Freshness::Always),
            "immutable" => Ok(Freshness::Immutable),
            _ => {
                let Some(d) = s.strip_prefix("ttl=") else {
                    return Err(format!(
                        "invalid validation '{s}': expected always, immutable or ttl=DURATION (e.g. ttl=30s)"
                    ));
                };
                humantime::parse_duration(d.trim())
                    .map(Freshness::Ttl)
                    .map_err(|e| format!("invalid validation '{s}': {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!("always".parse::<Freshness>(), Ok(Freshness::Always));
        assert_eq!("immutable".parse::<Freshness>(), Ok(Freshness::Immutable));
        let ttl: Freshness = "ttl=90s".parse().unwrap();
        assert_eq!(ttl, Freshness::Ttl(Duration::from_secs(90)));
        assert_eq!(ttl.to_string(), "ttl=1m 30s");
        assert!("ttl=soon".parse::<Freshness>().unwrap_err().contains("ttl=soon"));
        assert!("sometimes".parse::<Freshness>().is_err());
        assert!(!Freshness::Always.still_valid(Duration::ZERO));
        assert!(ttl.still_valid(Duration::from_secs(89)) && !ttl.still_valid(Duration::from_secs(90)));
    }
}
