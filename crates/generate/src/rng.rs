//! The generator's random numbers: seeded, so a capture can be made again.

/// SplitMix64: small, fast, good enough for traffic synthesis.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
    pub(crate) fn normal(&mut self) -> f64 {
        let (u1, u2) = (1.0 - self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Inverse Gaussian (Michael, Schucany & Haas 1976).
    pub(crate) fn inverse_gaussian(&mut self, mu: f64, lambda: f64) -> f64 {
        let n = self.normal();
        let y = n * n;
        let x = mu + mu * mu * y / (2.0 * lambda)
            - mu / (2.0 * lambda) * (4.0 * mu * lambda * y + mu * mu * y * y).sqrt();
        if self.uniform() <= mu / (mu + x) {
            x
        } else {
            mu * mu / x
        }
    }
}
