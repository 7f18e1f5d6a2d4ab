//! The LIKE shapes a liquid byte array evaluates itself.
//!
//! Arrow evaluates `abc`, `abc%`, `%abc` and `%abc%` (no `_`, no `\`) with
//! plain byte comparisons and everything else with a regex; only the former
//! are mirrored here, so the results agree byte for byte. Other shapes make
//! [`LikeMatcher::parse`] return `None` and the caller decodes instead.

/// Where the needle must occur in a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `abc`: the whole value.
    Exact,
    /// `abc%`: a prefix.
    Prefix,
    /// `%abc`: a suffix.
    Suffix,
    /// `%abc%`: anywhere.
    Contains,
}

/// A parsed LIKE pattern of one of the supported shapes.
#[derive(Debug, Clone)]
pub(crate) struct LikeMatcher {
    needle: Vec<u8>,
    /// SIMD substring search for case-sensitive `%abc%` (what Arrow's kernel uses too).
    finder: memchr::memmem::Finder<'static>,
    shape: Shape,
    /// ILIKE: ASCII case folding. Only exact when both the pattern and every
    /// value are ASCII (Arrow then folds ASCII only); the caller checks the
    /// values, [`LikeMatcher::parse`] the pattern.
    ascii_case_insensitive: bool,
}

impl LikeMatcher {
    /// Parses `pattern`, or `None` when its shape is not supported (wildcards
    /// or escapes inside the needle, or a non-ASCII ILIKE pattern).
    pub(crate) fn parse(pattern: &str, case_insensitive: bool) -> Option<Self> {
        if case_insensitive && !pattern.is_ascii() {
            return None;
        }
        let (lead, rest) = match pattern.strip_prefix('%') {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let (trail, needle) = match rest.strip_suffix('%') {
            Some(needle) => (true, needle),
            None => (false, rest),
        };
        if needle.bytes().any(|b| matches!(b, b'%' | b'_' | b'\\')) {
            return None;
        }
        let shape = match (lead, trail) {
            (false, false) => Shape::Exact,
            (false, true) => Shape::Prefix,
            (true, false) => Shape::Suffix,
            (true, true) => Shape::Contains,
        };
        Some(LikeMatcher {
            finder: memchr::memmem::Finder::new(needle.as_bytes()).into_owned(),
            needle: needle.as_bytes().to_vec(),
            shape,
            ascii_case_insensitive: case_insensitive,
        })
    }

    /// Whether [`Self::mark_contained`] applies: case-sensitive `%abc%`
    /// with a needle.
    pub(crate) fn searches_blocks(&self) -> bool {
        self.shape == Shape::Contains && !self.ascii_case_insensitive && !self.needle.is_empty()
    }

    /// Marks in `hits` (one per value) the values that hold the needle,
    /// searching `bytes` — values back to back, value `j` ending at
    /// `ends[j]` — in one pass ([`Self::searches_blocks`] patterns only).
    /// One substring search over a block of values beats one per value
    /// when matches are rare, as most of a scan's are.
    pub(crate) fn mark_contained(&self, bytes: &[u8], ends: &[usize], hits: &mut [bool]) {
        debug_assert!(self.searches_blocks());
        let mut from = 0;
        while let Some(p) = self.finder.find(&bytes[from..]) {
            let at = from + p;
            // The value the match starts in; it counts if it ends there too.
            let j = ends.partition_point(|&e| e <= at);
            if j >= ends.len() {
                break;
            }
            if at + self.needle.len() <= ends[j] {
                hits[j] = true;
                from = ends[j];
            } else {
                from = at + 1;
            }
        }
    }

    /// Whether this is an ILIKE matcher (valid only over ASCII values).
    pub(crate) fn is_case_insensitive(&self) -> bool {
        self.ascii_case_insensitive
    }

    /// Whether `value` matches the pattern.
    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        let n = self.needle.len();
        if value.len() < n {
            return false;
        }
        match self.shape {
            Shape::Exact => value.len() == n && self.eq(value),
            Shape::Prefix => self.eq(&value[..n]),
            Shape::Suffix => self.eq(&value[value.len() - n..]),
            Shape::Contains => self.contains(value),
        }
    }

    /// Substring search: memmem when case matters; for ILIKE, scan for the
    /// needle's first byte and compare the rest only there.
    fn contains(&self, value: &[u8]) -> bool {
        if !self.ascii_case_insensitive {
            return self.finder.find(value).is_some();
        }
        let Some(&first) = self.needle.first() else {
            return true;
        };
        let last_start = value.len() - self.needle.len();
        let first_matches = |b: &u8| match self.ascii_case_insensitive {
            true => b.eq_ignore_ascii_case(&first),
            false => *b == first,
        };
        let mut start = 0;
        while let Some(p) = value[start..=last_start].iter().position(first_matches) {
            let at = start + p;
            if self.eq(&value[at..at + self.needle.len()]) {
                return true;
            }
            if at == last_start {
                return false;
            }
            start = at + 1;
        }
        false
    }

    fn eq(&self, part: &[u8]) -> bool {
        if self.ascii_case_insensitive {
            part.eq_ignore_ascii_case(&self.needle)
        } else {
            part == self.needle.as_slice()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let m = |p: &str, v: &str| LikeMatcher::parse(p, false).unwrap().matches(v.as_bytes());
        assert!(m("abc", "abc") && !m("abc", "abcd"));
        assert!(m("ab%", "abcd") && !m("ab%", "xab"));
        assert!(m("%cd", "abcd") && !m("%cd", "cdx"));
        assert!(m("%bc%", "abcd") && !m("%bc%", "acbd"));
        assert!(m("%aab%", "aaab") && m("%ab%", "ab") && !m("%ab%", "a") && !m("%ba%", "aab"));
        assert!(m("%", "") && m("%%", "x"));
        assert!(LikeMatcher::parse("a_c", false).is_none());
        assert!(LikeMatcher::parse("a%c", false).is_none());
        assert!(LikeMatcher::parse("a\\%", false).is_none());
        assert!(LikeMatcher::parse("é%", true).is_none());
        assert!(LikeMatcher::parse("AB%", true).unwrap().matches(b"abc"));
    }

    #[test]
    fn a_block_search_marks_values_that_hold_the_needle_whole() {
        let values: [&[u8]; 6] = [b"xab", b"c", b"", b"abab", b"a", b"bzz"];
        let bytes = values.concat();
        let ends: Vec<usize> = values
            .iter()
            .scan(0, |e, v| {
                *e += v.len();
                Some(*e)
            })
            .collect();
        for pattern in ["%ab%", "%b%", "%abc%", "%ba%", "%zz%", "%xa%"] {
            let m = LikeMatcher::parse(pattern, false).unwrap();
            assert!(m.searches_blocks());
            let mut hits = vec![false; values.len()];
            m.mark_contained(&bytes, &ends, &mut hits);
            let want: Vec<bool> = values.iter().map(|v| m.matches(v)).collect();
            assert_eq!(hits, want, "{pattern}");
        }
        assert!(!LikeMatcher::parse("ab%", false).unwrap().searches_blocks());
        assert!(!LikeMatcher::parse("%ab%", true).unwrap().searches_blocks());
        assert!(!LikeMatcher::parse("%%", false).unwrap().searches_blocks());
    }
}
