//! Loss and delay emulation in user space (the kernel here has no netem).
//!
//! [`GilbertElliott`] draws bursty loss from an average loss L and a
//! burstiness b = P(loss | previous lost): r = 1 − b, p = L(1 − b)/(1 − L)
//! (reference §5), so b = L gives independent loss. [`LinkEmulator`] adds a
//! fixed delay, uniform jitter and, optionally, a bandwidth: packets then
//! queue for the link and wait their turn to be sent, and a packet that
//! would wait longer than [`MAX_QUEUE_NS`] is dropped (counted). Both are
//! seeded and deterministic; the simulator and the real node use the same
//! code.

/// SplitMix64: small, fast, seedable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Two-state bursty loss.
#[derive(Debug, Clone)]
pub struct GilbertElliott {
    /// P(good → bad).
    pub p: f64,
    /// Burstiness: P(loss | previous lost).
    pub b: f64,
    last_lost: bool,
}

impl GilbertElliott {
    /// Average loss `loss` (0–1) with burstiness `burst` (0 or ≥ loss;
    /// values below `loss` mean independent loss).
    pub fn new(loss: f64, burst: f64) -> GilbertElliott {
        let b = if burst < loss { loss } else { burst };
        let p = if loss >= 1.0 { 1.0 } else { loss * (1.0 - b) / (1.0 - loss) };
        GilbertElliott { p, b, last_lost: false }
    }

    /// True when this packet is lost.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        let threshold = if self.last_lost { self.b } else { self.p };
        self.last_lost = rng.uniform() < threshold;
        self.last_lost
    }
}

/// Longest a packet waits for a rate-limited link before it is dropped.
pub const MAX_QUEUE_NS: i64 = 200_000_000;
/// Bytes a datagram takes on the wire beyond itself: the outer IPv4 and
/// UDP headers of the overlay (20 + 8).
pub const OUTER_HEADER: usize = 28;

/// One direction of an emulated link.
#[derive(Debug, Clone)]
pub struct LinkEmulator {
    /// Loss process.
    pub loss: GilbertElliott,
    /// Fixed one-way delay (ns).
    pub delay_ns: i64,
    /// Uniform extra delay in [0, jitter) (ns).
    pub jitter_ns: i64,
    /// The link is cut: everything is lost.
    pub down: bool,
    rng: Rng,
    /// Packets offered and lost.
    pub offered: u64,
    /// Packets lost.
    pub lost: u64,
    /// Bandwidth in bits per second; 0 for none.
    pub rate_bps: u64,
    /// When the link has sent everything queued so far.
    busy_until: i64,
    /// Packets dropped because the queue was full (counted in `lost` too).
    pub queue_drops: u64,
    /// Bytes put on the wire (with [`OUTER_HEADER`]).
    pub bytes: u64,
}

impl LinkEmulator {
    /// A link with these properties and seed.
    pub fn new(loss: f64, burst: f64, delay_ns: i64, jitter_ns: i64, seed: u64) -> LinkEmulator {
        LinkEmulator {
            loss: GilbertElliott::new(loss, burst),
            delay_ns,
            jitter_ns,
            down: false,
            rng: Rng::new(seed),
            offered: 0,
            lost: 0,
            rate_bps: 0,
            busy_until: 0,
            queue_drops: 0,
            bytes: 0,
        }
    }

    /// When a datagram of `len` bytes sent at `now` arrives, or None if it
    /// is lost.
    pub fn admit(&mut self, now: i64, len: usize) -> Option<i64> {
        self.offered += 1;
        let mut sent = now;
        if self.rate_bps > 0 {
            let start = self.busy_until.max(now);
            if start - now > MAX_QUEUE_NS {
                self.queue_drops += 1;
                self.lost += 1;
                return None;
            }
            let bits = ((len + OUTER_HEADER) * 8) as i64;
            sent = start.saturating_add(bits * 1_000_000_000 / self.rate_bps as i64);
            self.busy_until = sent;
        }
        self.bytes += (len + OUTER_HEADER) as u64;
        if self.down || self.loss.lose(&mut self.rng) {
            self.lost += 1;
            return None;
        }
        let jitter = if self.jitter_ns > 0 {
            (self.rng.next_u64() % self.jitter_ns as u64) as i64
        } else {
            0
        };
        Some(sent.saturating_add(self.delay_ns).saturating_add(jitter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vector_and_measured_averages() {
        // Reference §5: L 2 %, b 0.75 -> p 0.005102, mean burst 4.
        let g = GilbertElliott::new(0.02, 0.75);
        assert!((g.p - 0.005102).abs() < 1e-6);
        for (loss, burst) in [(0.05, 0.0), (0.05, 0.5), (0.02, 0.75)] {
            let mut g = GilbertElliott::new(loss, burst);
            let mut rng = Rng::new(9);
            let n = 2_000_000;
            let (mut lost, mut bursts) = (0, 0);
            let mut prev = false;
            for _ in 0..n {
                let l = g.lose(&mut rng);
                lost += l as u32;
                bursts += (l && !prev) as u32;
                prev = l;
            }
            let avg = lost as f64 / n as f64;
            assert!((avg - loss).abs() < loss * 0.03, "{loss} {burst}: {avg}");
            let mean_burst = lost as f64 / bursts as f64;
            let want = 1.0 / (1.0 - burst.max(loss));
            assert!((mean_burst - want).abs() < want * 0.05, "{mean_burst} vs {want}");
        }
    }
}
