//! `calliper generate`: a synthetic capture of many concurrent calls with a
//! known truth, for benchmarks and tests (the `calliper-generate` crate makes
//! it; this writes it to files).

use anyhow::{bail, Context, Result};
use calliper_generate::{write_pcap, Spec};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Output pcap file.
    #[arg(long, short)]
    output: PathBuf,
    /// Per-stream truth (JSON lines): sent and dropped packets, a line per
    /// stream of each call that ended (calls cut off by --duration have none).
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Calls to generate.
    #[arg(long, default_value_t = Spec::default().calls)]
    calls: u64,
    /// Mean concurrent calls in steady state (sets the arrival rate).
    #[arg(long, default_value_t = Spec::default().concurrent)]
    concurrent: f64,
    /// Mean hold time, seconds (inverse Gaussian μ).
    #[arg(long, default_value_t = Spec::default().hold_mean)]
    hold_mean: f64,
    /// Inverse Gaussian shape λ, seconds.
    #[arg(long, default_value_t = Spec::default().hold_shape)]
    hold_shape: f64,
    /// Codec mix as name:weight, from pcmu, pcma, g729, g722.
    #[arg(long, default_value_t = Spec::default().codecs)]
    codecs: String,
    /// Average packet loss, percent.
    #[arg(long, default_value_t = Spec::default().loss)]
    loss: f64,
    /// Burstiness b = P(loss | previous lost); 0 gives independent loss.
    #[arg(long, default_value_t = Spec::default().burst)]
    burst: f64,
    /// Random seed.
    #[arg(long, default_value_t = Spec::default().seed)]
    seed: u64,
    /// Percent of RTP packets sent twice (the copy 1 ms later, with its own IP ID).
    #[arg(long, default_value_t = Spec::default().duplicate)]
    duplicate: f64,
    /// Percent of RTP packets held back 30 ms, so they arrive after the next one.
    #[arg(long, default_value_t = Spec::default().reorder)]
    reorder: f64,
    /// Also send this many INVITEs with random Call-IDs that are never
    /// answered (an INVITE flood), mixed into the calls.
    #[arg(long, default_value_t = Spec::default().flood)]
    flood: u64,
    /// Start in steady state: the first --concurrent calls arrive within the
    /// first second instead of over one mean hold time.
    #[arg(long)]
    warm_start: bool,
    /// Stop writing after this many seconds of traffic (calls still up are
    /// cut off without BYE), for benchmark captures of a fixed length.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// The server answers each flood INVITE with 407 (a scan against a proxy
    /// that authenticates), 1 ms later.
    #[arg(long)]
    flood_challenged: bool,
    /// Flood INVITEs per second.
    #[arg(long, default_value_t = Spec::default().flood_rate)]
    flood_rate: f64,
    /// Also send this many hostile messages: thousands of headers, absurd
    /// Content-Lengths, huge Call-IDs, thousands of SDP media lines, binary junk.
    #[arg(long, default_value_t = Spec::default().hostile)]
    hostile: u64,
}

impl GenerateArgs {
    fn spec(&self) -> Spec {
        Spec {
            calls: self.calls,
            concurrent: self.concurrent,
            hold_mean: self.hold_mean,
            hold_shape: self.hold_shape,
            codecs: self.codecs.clone(),
            loss: self.loss,
            burst: self.burst,
            seed: self.seed,
            duplicate: self.duplicate,
            reorder: self.reorder,
            flood: self.flood,
            warm_start: self.warm_start,
            duration: self.duration,
            flood_challenged: self.flood_challenged,
            flood_rate: self.flood_rate,
            hostile: self.hostile,
        }
    }
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let spec = a.spec();
    spec.check().map_err(anyhow::Error::msg)?;
    if a.truth.as_ref().is_some_and(|t| crate::files::same_path(t, &a.output)) {
        bail!("--truth and --output name the same file");
    }
    // The truth first: a truth file that cannot be made leaves the output untouched.
    let mut truth = match &a.truth {
        Some(p) => Some(BufWriter::new(
            calliper_store::create_private(p)
                .with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let file = calliper_store::create_private(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let made = write_pcap(&spec, &mut out, truth.as_mut().map(|t| t as &mut dyn Write))?;
    out.flush()?;
    if let Some(t) = truth.as_mut() {
        t.flush()?;
    }
    eprintln!(
        "calliper: wrote {} packets of {} calls to {}",
        made.packets,
        made.calls,
        a.output.display()
    );
    Ok(())
}
