//! The protocol's counters: one definition, summed over nodes by
//! [`Counters::add`] so no counter is left out of a total.

macro_rules! counters {
    ($($(#[doc = $doc:expr])* $name:ident,)*) => {
        /// What a node did and refused. Every drop has a counter.
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Adds `other`'s counts to these (several nodes' totals).
            pub fn add(&mut self, other: &Counters) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

counters! {
    /// Data originated here.
    originated,
    /// Data forwarded for others.
    forwarded,
    /// Data delivered here.
    delivered,
    /// Copies dropped (link or end-to-end duplicates).
    duplicates,
    /// Gaps noticed (link sequence numbers missing).
    gaps,
    /// Gaps filled by a retransmission or a late original.
    recovered,
    /// Gaps given up (budget passed, or too many at once).
    given_up,
    /// NACK datagrams sent.
    nacks_sent,
    /// Jumps in a neighbour's data numbers too large to be loss (over
    /// 65 536): taken as a new start, not counted as gaps.
    data_resyncs,
    /// Tails sent (data paused: the next data sequence number, so the
    /// neighbour finds the last packets before the pause if they were lost).
    tails_sent,
    /// Packets retransmitted.
    retransmitted,
    /// Retransmissions refused by the token bucket.
    retransmit_no_tokens,
    /// NACKed packets no longer (or never) in the history.
    retransmit_not_held,
    /// Data with no route to its destination.
    no_route,
    /// Data whose hop limit ran out (a loop while routes converge).
    ttl_expired,
    /// Datagrams from addresses that are not neighbours.
    not_neighbour,
    /// Datagrams that do not decode.
    malformed,
    /// Link-state updates originated.
    lsu_originated,
    /// Route table recomputations that changed a route.
    route_changes,
    /// Route table computations (Dijkstra runs), changed or not.
    route_computations,
    /// Link-state updates older than the copy held (answered with that copy).
    lsu_stale,
    /// Link-state updates whose sequence number is more than
    /// `LSU_SEQ_WINDOW` from the copy held, either way (ignored).
    lsu_out_of_window,
    /// Copies of this node's own link state it did not send (a forgery, or
    /// its state before a restart), answered by re-asserting its state with
    /// a higher sequence number.
    lsu_self_reasserted,
    /// Link-state updates from a new origin refused because the origin
    /// table was full (`max_origins`).
    lsu_origins_refused,
    /// Unreachable origins dropped from a full table to make room for one
    /// that joins the known graph.
    lsu_origins_evicted,
    /// Origins dropped because their state was not refreshed within
    /// `lsu_max_age`.
    lsu_expired,
    /// Datagrams or deliveries dropped because the caller did not drain them.
    queue_overflow,
    /// Compressed data lost to cRTP context damage (a gap given up that
    /// the decompressor could not bridge, until the context is refreshed).
    crtp_damaged,
    /// Compressed data held behind a gap for in-order decompression.
    crtp_held,
    /// Compressed data dropped because too many were held.
    crtp_held_dropped,
}
