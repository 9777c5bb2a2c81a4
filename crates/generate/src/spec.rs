//! What a capture should hold: the parameters of `calliper generate`, their
//! defaults (the command line reads them from here) and their checks.

/// The traffic to synthesise.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Calls to generate.
    pub calls: u64,
    /// Mean concurrent calls in steady state (sets the arrival rate).
    pub concurrent: f64,
    /// Mean hold time, seconds (inverse Gaussian μ).
    pub hold_mean: f64,
    /// Inverse Gaussian shape λ, seconds.
    pub hold_shape: f64,
    /// Codec mix as name:weight, from pcmu, pcma, g729, g722.
    pub codecs: String,
    /// Average packet loss, percent.
    pub loss: f64,
    /// Burstiness b = P(loss | previous lost); 0 gives independent loss.
    pub burst: f64,
    /// Random seed.
    pub seed: u64,
    /// Percent of RTP packets sent twice (the copy 1 ms later, own IP ID).
    pub duplicate: f64,
    /// Percent of RTP packets held back 30 ms (they arrive after the next).
    pub reorder: f64,
    /// INVITEs with random Call-IDs that are never answered, mixed in.
    pub flood: u64,
    /// The first `concurrent` calls arrive within the first second.
    pub warm_start: bool,
    /// Stop after this many seconds of traffic (calls still up are cut off
    /// without BYE).
    pub duration: Option<f64>,
    /// The server answers each flood INVITE with 407, 1 ms later.
    pub flood_challenged: bool,
    /// Flood INVITEs per second.
    pub flood_rate: f64,
    /// Hostile messages: thousands of headers, absurd Content-Lengths, huge
    /// Call-IDs, thousands of SDP media lines, binary junk.
    pub hostile: u64,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            calls: 1000,
            concurrent: 100.0,
            // As measured in an operator network.
            hold_mean: 117.0,
            hold_shape: 19.0,
            codecs: "pcmu:30,pcma:20,g729:40,g722:10".into(),
            loss: 1.0,
            burst: 0.0,
            seed: 1,
            duplicate: 0.0,
            reorder: 0.0,
            flood: 0,
            warm_start: false,
            duration: None,
            flood_challenged: false,
            flood_rate: 20_000.0,
            hostile: 0,
        }
    }
}

/// A codec the generator sends: 20 ms packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Codec {
    pub(crate) name: &'static str,
    pub(crate) pt: u8,
    pub(crate) payload: usize,
    pub(crate) ts_step: u32,
}

/// The codecs by the names `Spec::codecs` uses.
fn codec(name: &str) -> Result<Codec, String> {
    let (name, pt, payload) = match name {
        "pcmu" => ("PCMU", 0, 160),
        "pcma" => ("PCMA", 8, 160),
        "g729" => ("G729", 18, 20),
        "g722" => ("G722", 9, 160),
        other => return Err(format!("unknown codec {other:?} (use pcmu, pcma, g729, g722)")),
    };
    Ok(Codec { name, pt, payload, ts_step: 160 })
}

impl Spec {
    /// Checks every parameter (before any file is made for the capture);
    /// the error names the command line's option.
    pub fn check(&self) -> Result<(), String> {
        self.checked_mix().map(|_| ())
    }

    /// The codec mix with its weights, after checking every parameter;
    /// the error names the command line's option.
    pub(crate) fn checked_mix(&self) -> Result<Vec<(Codec, f64)>, String> {
        if !(0.0..=50.0).contains(&self.duplicate) || !(0.0..=50.0).contains(&self.reorder) {
            return Err("--duplicate and --reorder must be in [0, 50] percent".into());
        }
        if !(0.0..100.0).contains(&self.loss) || !(0.0..1.0).contains(&self.burst) {
            return Err("--loss must be in [0, 100) and --burst in [0, 1)".into());
        }
        // Written so that NaN fails every check (a comparison with NaN is false).
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if self.flood + self.hostile > u32::MAX as u64 || !positive(self.flood_rate) {
            return Err(
                "--flood plus --hostile must fit in 32 bits and --flood-rate be positive".into()
            );
        }
        if self.calls == 0
            || self.calls > u32::MAX as u64
            || !positive(self.concurrent)
            || !positive(self.hold_mean)
            || !positive(self.hold_shape)
        {
            return Err(
                "--calls, --concurrent, --hold-mean and --hold-shape must be positive".into()
            );
        }
        if self.duration.is_some_and(|d| !positive(d)) {
            return Err("--duration must be a positive number of seconds".into());
        }
        let mut mix = Vec::new();
        for part in self.codecs.split(',') {
            let (name, w) = part.split_once(':').unwrap_or((part, "1"));
            let w: f64 =
                w.parse().ok().filter(|w: &f64| *w >= 0.0 && w.is_finite()).ok_or_else(|| {
                    format!("--codecs: bad weight in {part:?} (a number, 0 or more)")
                })?;
            mix.push((codec(name.trim()).map_err(|e| format!("--codecs: {e}"))?, w));
        }
        if !positive(mix.iter().map(|(_, w)| w).sum()) {
            return Err("--codecs: the weights must not all be 0".into());
        }
        Ok(mix)
    }
}
