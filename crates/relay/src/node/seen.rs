//! End-to-end duplicate detection: a window over each origin's message
//! sequence numbers.

/// Which sequence numbers of an origin were delivered (end-to-end duplicates).
#[derive(Debug, Default)]
pub(super) struct Seen {
    top: Option<u32>,
    bits: u128,
}

impl Seen {
    /// True if `seq` is new (and records it).
    pub(super) fn first(&mut self, seq: u32) -> bool {
        let Some(top) = self.top else {
            self.top = Some(seq);
            self.bits = 1;
            return true;
        };
        let d = seq.wrapping_sub(top) as i32;
        if d > 0 {
            self.bits = if d >= 128 { 0 } else { self.bits << d };
            self.bits |= 1;
            self.top = Some(seq);
            true
        } else if -d >= 128 {
            false // too old to tell: treat as a copy
        } else {
            let bit = 1u128 << (-d);
            let new = self.bits & bit == 0;
            self.bits |= bit;
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_window_tells_copies_from_new_packets() {
        let mut s = Seen::default();
        assert!(s.first(10));
        assert!(s.first(12));
        assert!(s.first(11));
        assert!(!s.first(11));
        assert!(!s.first(10));
        assert!(s.first(500));
        assert!(!s.first(12)); // too old to tell
    }
}
