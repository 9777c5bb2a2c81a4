//! What the workspace's tests share: the captures they compare on
//! ([`captures`]), those crafted from headers ([`crafted`]) and those the
//! generator makes ([`generated`]), tshark
//! and what is read from it ([`oracle`]), the
//! in-process probe ([`probe`]: frames in; records, events and counters
//! out), and the reading of `CALLIPER_SKIP`.
//!
//! A test whose prerequisite (a tool, a capability, a capture collection)
//! is missing fails with a message saying what is missing, unless its group
//! was named in `CALLIPER_SKIP` (comma-separated; README): a test that
//! cannot run is never reported as passed by accident.

pub mod captures;
pub mod crafted;
pub mod generated;
pub mod oracle;
pub mod probe;

/// The environment variable naming the groups to skip.
pub const SKIP_VAR: &str = "CALLIPER_SKIP";

/// Whether `group` is named in `CALLIPER_SKIP`.
pub fn skip_asked(group: &str) -> bool {
    named_in(&std::env::var(SKIP_VAR).unwrap_or_default(), group)
}

/// For a test whose prerequisite is missing: true (after saying so) when
/// skipping `group` was asked for; otherwise it fails with `why` and how
/// to skip on purpose.
pub fn skip_requested(group: &str, why: &str) -> bool {
    if skip_asked(group) {
        eprintln!("skipped ({group} in {SKIP_VAR}): {why}");
        return true;
    }
    panic!("{why}\n(set {SKIP_VAR}={group} to skip this on purpose)");
}

/// Whether a comma-separated list names `group` (spaces around names ignored).
fn named_in(list: &str, group: &str) -> bool {
    list.split(',').any(|w| w.trim() == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_named_exactly() {
        assert!(named_in("netns, pesq", "pesq"));
        assert!(named_in("live", "live"));
        assert!(!named_in("shared-pcaps", "shared"));
        assert!(!named_in("", "live"));
    }
}
