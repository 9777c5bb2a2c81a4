//! Text patterns for SIP fields: exact, `prefix*`, `*suffix` or `*part*`,
//! compared without regard to ASCII case (SIP hosts are case-insensitive;
//! users usually are digits).

use crate::{error, RuleError};

/// How a pattern compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exact,
    Prefix,
    Suffix,
    Contains,
}

/// A pattern for one SIP field.
#[derive(Debug, Clone)]
pub struct Pattern {
    kind: Kind,
    /// The text without its stars, lower-cased.
    text: Box<str>,
    /// A searcher for `text`, built once (a rule is tried on every call).
    finder: Box<memchr::memmem::Finder<'static>>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, &self.text) == (other.kind, &other.text)
    }
}

impl Eq for Pattern {}

/// Longest pattern text accepted.
const MAX_PATTERN: usize = 256;

impl Pattern {
    /// Parses a pattern; `*` is allowed only at either end.
    pub fn parse(s: &str) -> Result<Pattern, RuleError> {
        if s.len() > MAX_PATTERN {
            return error(format!("pattern longer than {MAX_PATTERN} bytes"));
        }
        let (start, rest) = match s.strip_prefix('*') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (end, text) = match rest.strip_suffix('*') {
            Some(t) => (true, t),
            None => (false, rest),
        };
        if text.contains('*') {
            return error(format!("`{s}`: `*` may only start or end a pattern"));
        }
        let kind = match (start, end) {
            (false, false) => Kind::Exact,
            (false, true) => Kind::Prefix,
            (true, false) => Kind::Suffix,
            (true, true) => Kind::Contains,
        };
        let text: Box<str> = text.to_ascii_lowercase().into();
        Ok(Pattern {
            kind,
            finder: Box::new(memchr::memmem::Finder::new(text.as_bytes()).into_owned()),
            text,
        })
    }

    /// True when `s` matches.
    pub fn matches(&self, s: &str) -> bool {
        self.matches_lowered(&s.to_ascii_lowercase())
    }

    /// True when `s`, already ASCII lower-cased, matches (a rule table
    /// lowers a call's fields once for all its patterns). Linear in `s`.
    pub(crate) fn matches_lowered(&self, s: &str) -> bool {
        let (s, t) = (s.as_bytes(), self.text.as_bytes());
        match self.kind {
            Kind::Exact => s == t,
            Kind::Prefix => s.starts_with(t),
            Kind::Suffix => s.ends_with(t),
            Kind::Contains => self.finder.find(s).is_some(),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = match self.kind {
            Kind::Exact => ("", ""),
            Kind::Prefix => ("", "*"),
            Kind::Suffix => ("*", ""),
            Kind::Contains => ("*", "*"),
        };
        write!(f, "{a}{}{b}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let p = |s| Pattern::parse(s).unwrap();
        assert!(p("+4420*").matches("+442071234567"));
        assert!(!p("+4420*").matches("+4430"));
        assert!(p("*.example.com").matches("sip.EXAMPLE.com"));
        assert!(!p("*.example.com").matches("example.com"));
        assert!(p("*yealink*").matches("Yealink SIP-T46S"));
        assert!(p("alice").matches("ALICE") && !p("alice").matches("alice2"));
        assert!(p("*").matches("anything"));
        assert!(Pattern::parse("a*b").is_err());
        // Multi-byte text never splits a character (byte comparison).
        assert!(p("*é*").matches("café"));
        assert_eq!(p("*Yealink*").to_string(), "*yealink*");
    }
}
