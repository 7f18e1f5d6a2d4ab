//! How often a table's objects are revalidated against the object store.
//!
//! The string forms (`always`, `ttl=30s`, `immutable`, `notify`,
//! `notify,sweep=60s`) are the table config's `validation` contract.

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
    /// The store tells Silt what changed (inotify for `file://`, S3 event
    /// notifications posted to the admin endpoint): a validation is trusted
    /// until a change notice names the table, or for `sweep` at most (the
    /// safety net, and the staleness bound, when a notice is lost). The
    /// notices themselves are held by the table's
    /// [`ChangeNotices`](crate::ChangeNotices).
    Notify { sweep: Duration },
}

/// The sweep of `notify` when none is given: how long a validation is
/// trusted without a notice, so how stale a table can get when a notice is
/// lost. Five minutes: one LIST per table every five minutes is nothing to
/// a store, and a lost notice (a watcher that hit the inotify limit, an
/// event endpoint that was down) is the exception.
pub const DEFAULT_SWEEP: Duration = Duration::from_secs(300);

impl Freshness {
    /// `notify` with the default sweep ([`DEFAULT_SWEEP`]).
    pub const NOTIFY: Freshness = Freshness::Notify { sweep: DEFAULT_SWEEP };

    /// Whether a validation made `age` ago still holds by age alone (under
    /// `notify`, a change notice can end it sooner).
    pub fn still_valid(self, age: Duration) -> bool {
        match self {
            Freshness::Always => false,
            Freshness::Ttl(ttl) => age < ttl,
            Freshness::Immutable => true,
            Freshness::Notify { sweep } => age < sweep,
        }
    }
}

impl fmt::Display for Freshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Freshness::Always => f.write_str("always"),
            Freshness::Ttl(d) => write!(f, "ttl={}", humantime::format_duration(*d)),
            Freshness::Immutable => f.write_str("immutable"),
            Freshness::Notify { sweep } if *sweep == DEFAULT_SWEEP => f.write_str("notify"),
            Freshness::Notify { sweep } => write!(f, "notify,sweep={}", humantime::format_duration(*sweep)),
        }
    }
}

impl FromStr for Freshness {
    type Err = String;

    /// `always`, `immutable`, `ttl=DURATION` (e.g. `ttl=30s`, `ttl=5m`),
    /// `notify` or `notify,sweep=DURATION` (e.g. `notify,sweep=60s`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let duration =
            |d: &str| humantime::parse_duration(d.trim()).map_err(|e| format!("invalid validation '{s}': {e}"));
        match s {
            "always" => Ok(Freshness::Always),
            "immutable" => Ok(Freshness::Immutable),
            "notify" => Ok(Freshness::NOTIFY),
            _ => {
                if let Some(d) = s.strip_prefix("ttl=") {
                    return duration(d).map(Freshness::Ttl);
                }
                let Some(option) = s.strip_prefix("notify,") else {
                    return Err(format!(
                        "invalid validation '{s}': expected always, immutable, ttl=DURATION (e.g. ttl=30s), \
                         notify or notify,sweep=DURATION (e.g. notify,sweep=60s)"
                    ));
                };
                let Some(d) = option.trim().strip_prefix("sweep=") else {
                    return Err(format!(
                        "invalid validation '{s}': notify takes one option, sweep=DURATION"
                    ));
                };
                match duration(d)? {
                    Duration::ZERO => Err(format!(
                        "invalid validation '{s}': a sweep of 0 trusts nothing; use always"
                    )),
                    sweep => Ok(Freshness::Notify { sweep }),
                }
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

    #[test]
    fn notify_parses_alone_and_with_a_sweep() {
        // `notify` alone is the contract: the default sweep.
        assert_eq!("notify".parse::<Freshness>(), Ok(Freshness::NOTIFY));
        assert_eq!(
            " notify ".parse::<Freshness>(),
            Ok(Freshness::Notify { sweep: DEFAULT_SWEEP })
        );
        assert_eq!(Freshness::NOTIFY.to_string(), "notify");
        let one_minute = Freshness::Notify {
            sweep: Duration::from_secs(60),
        };
        assert_eq!("notify,sweep=60s".parse::<Freshness>(), Ok(one_minute));
        assert_eq!("notify, sweep=1m".parse::<Freshness>(), Ok(one_minute));
        assert_eq!(one_minute.to_string(), "notify,sweep=1m");
        assert_eq!(one_minute.to_string().parse::<Freshness>(), Ok(one_minute));
        assert!(one_minute.still_valid(Duration::from_secs(59)) && !one_minute.still_valid(Duration::from_secs(60)));
        for bad in [
            "notify,sweep=soon",
            "notify,ttl=5s",
            "notify,",
            "notify,sweep=0s",
            "notifyy",
        ] {
            let e = bad.parse::<Freshness>().unwrap_err();
            assert!(e.contains(bad.trim()), "{bad}: {e}");
        }
    }
}
