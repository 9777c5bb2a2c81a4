//! Slab storage with intrusive activity lists.
//!
//! Calls and streams live in a [`Slab`] (indices are stable, freed slots are
//! reused, so steady state allocates nothing). Each entry sits on at most one
//! [`List`], a doubly linked list threaded through the slab and ordered by
//! last activity: touching an entry moves it to the tail, so the head is always
//! the entry idle longest. Because every entry on one list shares one timeout,
//! expiry only ever looks at heads — no periodic scan of the table
//! (the VoIPCallMon design).

/// Index of an entry in a [`Slab`].
pub type Idx = u32;
const NIL: Idx = Idx::MAX;

/// Links of an entry.
#[derive(Debug, Clone, Copy)]
pub struct Links {
    prev: Idx,
    next: Idx,
    list: u8,
    /// Last activity, ns.
    pub stamp: i64,
}

impl Default for Links {
    fn default() -> Self {
        Links { prev: NIL, next: NIL, list: NONE, stamp: 0 }
    }
}

const NONE: u8 = u8::MAX;

/// Something stored in a slab and listed by activity.
pub trait Linked {
    /// The entry's links.
    fn links(&mut self) -> &mut Links;
}

/// Implements [`Linked`] for an entry keeping its links in a field `links`
/// and, given `key: K`, [`Keyed`] for one keeping its key in a field `key`:
/// every table's entries keep them so.
macro_rules! entry {
    ($t:ty) => {
        impl $crate::lru::Linked for $t {
            fn links(&mut self) -> &mut $crate::lru::Links {
                &mut self.links
            }
        }
    };
    ($t:ty, key: $k:ty) => {
        $crate::lru::entry!($t);
        impl $crate::lru::Keyed for $t {
            type Key = $k;
            fn key(&self) -> $k {
                self.key
            }
        }
    };
}
pub(crate) use entry;

/// A slab of `T` with free-slot reuse and several activity lists.
#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<Idx>,
    heads: [Idx; 4],
    tails: [Idx; 4],
    lens: [usize; 4],
    live: usize,
    cap: usize,
}

impl<T: Linked> Slab<T> {
    /// A slab holding at most `cap` live entries.
    pub fn with_capacity(cap: usize) -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            heads: [NIL; 4],
            tails: [NIL; 4],
            lens: [0; 4],
            live: 0,
            cap,
        }
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// True when another insert would exceed the cap.
    pub fn is_full(&self) -> bool {
        self.live >= self.cap
    }

    /// Stores `v`, or gives it back when the slab is full.
    pub fn insert(&mut self, v: T) -> Result<Idx, T> {
        if self.is_full() {
            return Err(v);
        }
        self.live += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(v);
            Ok(i)
        } else {
            self.slots.push(Some(v));
            Ok((self.slots.len() - 1) as Idx)
        }
    }

    /// The entry at `i`.
    pub fn get(&self, i: Idx) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }

    /// Starts loading entry `i` into the cache.
    #[inline]
    pub fn prefetch(&self, i: Idx) {
        if let Some(slot) = self.slots.get(i as usize) {
            crate::prefetch::prefetch_all(slot);
        }
    }

    /// The entry at `i`, mutably.
    pub fn get_mut(&mut self, i: Idx) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }

    /// Removes and returns the entry (unlinking it first).
    pub fn remove(&mut self, i: Idx) -> Option<T> {
        self.unlink(i);
        let v = self.slots.get_mut(i as usize)?.take()?;
        self.live -= 1;
        self.free.push(i);
        Some(v)
    }

    fn links(&mut self, i: Idx) -> &mut Links {
        self.slots[i as usize].as_mut().expect("linked slot is live").links()
    }

    /// Takes entry `i` off whatever list it is on; it stays in the slab.
    pub fn detach(&mut self, i: Idx) {
        self.unlink(i);
    }

    fn unlink(&mut self, i: Idx) {
        let Some(Some(_)) = self.slots.get(i as usize) else {
            return;
        };
        let l = *self.links(i);
        if l.list == NONE {
            return;
        }
        let list = l.list as usize;
        if l.prev == NIL {
            self.heads[list] = l.next;
        } else {
            self.links(l.prev).next = l.next;
        }
        if l.next == NIL {
            self.tails[list] = l.prev;
        } else {
            self.links(l.next).prev = l.prev;
        }
        self.lens[list] -= 1;
        let m = self.links(i);
        m.prev = NIL;
        m.next = NIL;
        m.list = NONE;
    }

    /// Moves entry `i` to the tail of `list` with activity time `now`.
    pub fn touch(&mut self, i: Idx, list: u8, now: i64) {
        let l = *self.links(i);
        if l.list == list && l.next == NIL {
            // Already the most recent: only the stamp changes (the hot path for RTP).
            self.links(i).stamp = now.max(l.stamp);
            return;
        }
        self.unlink(i);
        let li = list as usize;
        let tail = self.tails[li];
        {
            let m = self.links(i);
            m.list = list;
            m.prev = tail;
            m.next = NIL;
            // Stamps never go backwards, so each list stays ordered even if
            // a capture's timestamps step back.
            m.stamp = now.max(l.stamp);
        }
        if tail == NIL {
            self.heads[li] = i;
        } else {
            let ts = self.links(tail).stamp;
            if ts > self.links(i).stamp {
                self.links(i).stamp = ts;
            }
            self.links(tail).next = i;
        }
        self.tails[li] = i;
        self.lens[li] += 1;
    }

    /// The entry idle longest on `list` and its last activity.
    pub fn oldest(&mut self, list: u8) -> Option<(Idx, i64)> {
        let h = self.heads[list as usize];
        if h == NIL {
            return None;
        }
        Some((h, self.links(h).stamp))
    }

    /// The entry idle longest on `list` if it has been idle `timeout_ns`
    /// or more at `now`: the next to expire, oldest first.
    pub fn idle_past(&mut self, list: u8, now: i64, timeout_ns: i64) -> Option<Idx> {
        self.oldest(list).filter(|&(_, t)| now.saturating_sub(t) >= timeout_ns).map(|(i, _)| i)
    }

    /// Entries on `list`.
    pub fn list_len(&self, list: u8) -> usize {
        self.lens[list as usize]
    }

    /// Indices of all live entries (for the final flush only).
    pub fn live_indices(&self) -> Vec<Idx> {
        self.slots.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| i as Idx).collect()
    }
}

/// An entry of a [`KeyedSlab`]: it knows its key, so removing it also
/// removes it from the index.
pub trait Keyed: Linked {
    /// What the entry is found by.
    type Key: std::hash::Hash + Eq + Copy;
    /// The entry's key.
    fn key(&self) -> Self::Key;
}

/// A slab whose entries are also found by key: the reassembly tables
/// (datagrams by fragment key, TCP flows, SCTP messages), with the index
/// kept in step by the only two ways in and out, [`Self::insert`] and
/// [`Self::remove`].
#[derive(Debug)]
pub struct KeyedSlab<T: Keyed> {
    slab: Slab<T>,
    index: hashbrown::HashMap<T::Key, Idx>,
}

impl<T: Keyed> KeyedSlab<T> {
    /// A table holding at most `cap` live entries.
    pub fn with_capacity(cap: usize) -> Self {
        KeyedSlab { slab: Slab::with_capacity(cap), index: hashbrown::HashMap::new() }
    }

    /// The entry of `key`, if held.
    pub fn find(&self, key: &T::Key) -> Option<Idx> {
        self.index.get(key).copied()
    }

    /// Whether an entry of `key` is held.
    pub fn holds(&self, key: &T::Key) -> bool {
        self.index.contains_key(key)
    }

    /// Stores `v` and indexes it by its key (`Err(v)` when full).
    pub fn insert(&mut self, v: T) -> Result<Idx, T> {
        let key = v.key();
        let i = self.slab.insert(v)?;
        let held = self.index.insert(key, i);
        debug_assert!(held.is_none(), "a key inserted while held: find it first");
        Ok(i)
    }

    /// Removes entry `i` and its index entry.
    pub fn remove(&mut self, i: Idx) -> Option<T> {
        let v = self.slab.remove(i)?;
        self.index.remove(&v.key());
        Some(v)
    }

    /// See [`Slab::get`].
    pub fn get(&self, i: Idx) -> Option<&T> {
        self.slab.get(i)
    }

    /// See [`Slab::get_mut`].
    pub fn get_mut(&mut self, i: Idx) -> Option<&mut T> {
        self.slab.get_mut(i)
    }

    /// See [`Slab::touch`].
    pub fn touch(&mut self, i: Idx, list: u8, now: i64) {
        self.slab.touch(i, list, now)
    }

    /// See [`Slab::oldest`].
    pub fn oldest(&mut self, list: u8) -> Option<(Idx, i64)> {
        self.slab.oldest(list)
    }

    /// See [`Slab::idle_past`].
    pub fn idle_past(&mut self, list: u8, now: i64, timeout_ns: i64) -> Option<Idx> {
        self.slab.idle_past(list, now, timeout_ns)
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// True when no entry can be added.
    pub fn is_full(&self) -> bool {
        self.slab.is_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct E(Links);
    impl Linked for E {
        fn links(&mut self) -> &mut Links {
            &mut self.0
        }
    }

    /// The expiry test at the edges of time (a pcapng offset can put a
    /// packet anywhere): a time far before an entry's stamp expires nothing
    /// (the plain subtraction wrapped to a large positive age there, and
    /// every entry expired at once); a time far after expires it.
    #[test]
    fn idle_past_saturates_across_any_gap() {
        let mut s: Slab<E> = Slab::with_capacity(2);
        let a = s.insert(E::default()).ok().unwrap();
        let late = 5_000_000_000_000_000_000;
        s.touch(a, 0, late);
        assert_eq!(s.idle_past(0, -late, 1_000), None);
        assert_eq!(s.idle_past(0, i64::MIN, 0), None);
        assert_eq!(s.idle_past(0, late + 999, 1_000), None);
        assert_eq!(s.idle_past(0, late + 1_000, 1_000), Some(a));
        assert_eq!(s.idle_past(0, i64::MAX, i64::MAX - late), Some(a));
        assert_eq!(s.idle_past(1, i64::MAX, 0), None);
    }

    #[test]
    fn oldest_follows_touches_and_moves_between_lists() {
        let mut s: Slab<E> = Slab::with_capacity(3);
        let a = s.insert(E::default()).ok().unwrap();
        let b = s.insert(E::default()).ok().unwrap();
        let c = s.insert(E::default()).ok().unwrap();
        assert!(s.insert(E::default()).is_err());
        s.touch(a, 0, 10);
        s.touch(b, 0, 20);
        s.touch(c, 0, 30);
        assert_eq!(s.oldest(0), Some((a, 10)));
        s.touch(a, 0, 40);
        assert_eq!(s.oldest(0), Some((b, 20)));
        s.touch(b, 1, 50);
        assert_eq!(s.oldest(0), Some((c, 30)));
        assert_eq!(s.oldest(1), Some((b, 50)));
        assert_eq!((s.list_len(0), s.list_len(1)), (2, 1));
        s.remove(c);
        assert_eq!(s.oldest(0), Some((a, 40)));
        let d = s.insert(E::default()).ok().unwrap();
        assert_eq!(d, c, "freed slot is reused");
        s.remove(a);
        s.remove(b);
        assert_eq!(s.oldest(0), None);
        assert_eq!(s.oldest(1), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn stamps_never_go_backwards() {
        let mut s: Slab<E> = Slab::with_capacity(4);
        let a = s.insert(E::default()).ok().unwrap();
        let b = s.insert(E::default()).ok().unwrap();
        s.touch(a, 0, 100);
        s.touch(b, 0, 50); // capture time stepped back
        s.touch(a, 0, 60);
        assert_eq!(s.oldest(0), Some((b, 100)));
    }

    #[derive(Default)]
    struct K(Links, u8);
    impl Linked for K {
        fn links(&mut self) -> &mut Links {
            &mut self.0
        }
    }
    impl Keyed for K {
        type Key = u8;
        fn key(&self) -> u8 {
            self.1
        }
    }

    #[test]
    fn a_keyed_slab_finds_what_it_holds_and_forgets_what_it_removed() {
        let mut s: KeyedSlab<K> = KeyedSlab::with_capacity(2);
        let a = s.insert(K(Links::default(), 7)).ok().unwrap();
        let b = s.insert(K(Links::default(), 9)).ok().unwrap();
        assert!(s.insert(K(Links::default(), 11)).is_err());
        assert!(!s.holds(&11), "a refused entry is not indexed");
        assert_eq!((s.find(&7), s.find(&9)), (Some(a), Some(b)));
        assert_eq!(s.remove(a).map(|k| k.1), Some(7));
        assert!(!s.holds(&7) && s.holds(&9) && s.len() == 1);
        assert!(s.remove(a).is_none());
    }
}
