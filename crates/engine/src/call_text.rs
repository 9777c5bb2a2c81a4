//! A call's text — Call-ID, tag, parties, user agents, reasons — in one
//! allocation with 16-bit ends, instead of a dozen strings: at 50 000
//! concurrent calls the separate strings, their headers and their
//! allocator overhead cost more than the rest of a call's signalling state
//! (issue 32's 2 KB per call). Text is written rarely (the INVITE, an
//! answer, an end), so a write rebuilds the allocation.

use crate::lru::{Idx, Slab};
use crate::Call;
use calliper_model::Party;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// The text a call keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    CallId,
    CallerTag,
    FromUri,
    FromUser,
    FromDisplay,
    ToUri,
    ToUser,
    ToDisplay,
    CallerUa,
    CalleeUa,
    FinalReason,
    HangupReason,
}

/// How many fields a call's text has.
pub(crate) const FIELDS: usize = Field::HangupReason as usize + 1;

/// Every field is cut before it is kept (`MAX_TEXT`, `MAX_CALL_ID`), so the
/// whole fits 16-bit offsets with room to spare.
const _: () = assert!(crate::MAX_CALL_ID + (FIELDS - 1) * crate::MAX_TEXT <= u16::MAX as usize);

#[derive(Debug, Clone, Default)]
pub(crate) struct CallText {
    /// The set fields, one after another in [`Field`] order.
    text: Box<str>,
    /// Where each field ends in `text` (it starts where the one before ends).
    ends: [u16; FIELDS],
    /// Bit `f`: field `f` is set (a set field may be empty).
    set: u16,
}

impl CallText {
    /// A call's text from its fields, in [`Field`] order.
    pub(crate) fn new(fields: [Option<&str>; FIELDS]) -> Self {
        let mut text = String::with_capacity(fields.iter().flatten().map(|s| s.len()).sum());
        let mut ends = [0; FIELDS];
        let mut set = 0;
        for (i, f) in fields.iter().enumerate() {
            if let Some(s) = f {
                text.push_str(s);
                set |= 1 << i;
            }
            ends[i] = text.len() as u16;
        }
        CallText { text: text.into_boxed_str(), ends, set }
    }

    /// Field `f`, if set.
    pub(crate) fn get(&self, f: Field) -> Option<&str> {
        self.get_at(f as usize)
    }

    /// The field at index `i` of [`Field`]'s order, if set.
    fn get_at(&self, i: usize) -> Option<&str> {
        if self.set & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        Some(&self.text[start..self.ends[i] as usize])
    }

    /// The Call-ID (always set).
    pub(crate) fn call_id(&self) -> &str {
        self.get(Field::CallId).unwrap_or("")
    }

    /// Sets (or clears) field `f`, rebuilding the text if it changes (an
    /// in-dialog request that leaves it as it was allocates nothing).
    pub(crate) fn set(&mut self, f: Field, value: Option<&str>) {
        if self.get(f) == value {
            return;
        }
        let mut fields = [None; FIELDS];
        for (i, slot) in fields.iter_mut().enumerate() {
            *slot = if i == f as usize { value } else { self.get_at(i) };
        }
        *self = CallText::new(fields);
    }

    /// The caller's (From) or callee's (To) party, as the record reports it.
    pub(crate) fn party(&self, from: bool) -> Party {
        let [uri, user, display] = if from {
            [Field::FromUri, Field::FromUser, Field::FromDisplay]
        } else {
            [Field::ToUri, Field::ToUser, Field::ToDisplay]
        };
        Party {
            uri: self.get(uri).unwrap_or("").to_string(),
            user: self.get(user).map(String::from),
            display_name: self.get(display).map(String::from),
        }
    }
}

/// Calls by Call-ID. The table holds only slab indexes: the Call-ID is the
/// call's own text, not a second copy (randomly seeded, like every table an
/// attacker fills).
#[derive(Default)]
pub(crate) struct CallIds {
    table: HashTable<Idx>,
    hasher: DefaultHashBuilder,
}

impl CallIds {
    /// The call with Call-ID `id`.
    pub(crate) fn get(&self, id: &str, calls: &Slab<Call>) -> Option<Idx> {
        let hash = self.hasher.hash_one(id);
        self.table.find(hash, |&i| calls.get(i).is_some_and(|c| c.text.call_id() == id)).copied()
    }

    /// Files call `idx` (in `calls` already) under its Call-ID `id`.
    pub(crate) fn insert(&mut self, id: &str, idx: Idx, calls: &Slab<Call>) {
        let hasher = &self.hasher;
        let rehash = |&i: &Idx| hasher.hash_one(calls.get(i).map_or("", |c| c.text.call_id()));
        self.table.insert_unique(hasher.hash_one(id), idx, rehash);
    }

    /// Forgets call `idx`, filed under `id` (it may have left `calls`).
    pub(crate) fn remove(&mut self, id: &str, idx: Idx) {
        if let Ok(entry) = self.table.find_entry(self.hasher.hash_one(id), |&i| i == idx) {
            entry.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set, empty and unset fields stay apart, and a later write changes
    /// only its own field.
    #[test]
    fn fields_keep_their_values_across_writes() {
        let mut fields = [None; FIELDS];
        fields[Field::CallId as usize] = Some("abc@host");
        fields[Field::FromUri as usize] = Some("sip:alice@example.com");
        fields[Field::FromDisplay as usize] = Some("");
        fields[Field::ToUri as usize] = Some("sip:bob@example.com");
        fields[Field::CallerUa as usize] = Some("Grandstream ✓");
        let mut t = CallText::new(fields);
        for (i, &expected) in fields.iter().enumerate() {
            assert_eq!(t.get_at(i), expected, "field {i}");
        }
        assert_eq!(t.get(Field::ToUri), Some("sip:bob@example.com"));
        t.set(Field::CalleeUa, Some("Asterisk"));
        t.set(Field::FromDisplay, None);
        t.set(Field::HangupReason, Some("Q.850;cause=16"));
        assert_eq!(t.call_id(), "abc@host");
        assert_eq!(t.get(Field::CalleeUa), Some("Asterisk"));
        assert_eq!(t.get(Field::FromDisplay), None);
        assert_eq!(t.get(Field::HangupReason), Some("Q.850;cause=16"));
        assert_eq!(t.get(Field::CallerUa), Some("Grandstream ✓"));
        let from = t.party(true);
        assert_eq!(
            (from.uri.as_str(), from.user, from.display_name),
            ("sip:alice@example.com", None, None)
        );
        assert_eq!(t.party(false).uri, "sip:bob@example.com");
    }
}
