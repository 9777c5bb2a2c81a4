//! The probe's TOML configuration file: every key is a `calliper probe`
//! flag's long name (`max-calls = 100000`, `interface = ["eth0", "eth1"]`,
//! `no-promiscuous = true`), so flags and keys cannot drift apart. A flag
//! given on the command line wins over the file.

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use std::ffi::OsString;
use std::path::Path;

/// Largest configuration file read.
const MAX_BYTES: u64 = 1 << 20;

/// Keys that make no sense in the file itself.
const NOT_IN_FILE: [&str; 4] = ["config", "check-config", "help", "version"];

/// `argv` with the settings of the `--config FILE` of the `probe`
/// subcommand inserted after `probe` (those the command line does not set).
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some(at) = argv.iter().position(|a| a == "probe") else {
        return Ok(argv);
    };
    let Some(path) = config_path(&argv[at + 1..]) else {
        return Ok(argv);
    };
    let extra = settings(Path::new(&path), &argv[at + 1..])
        .with_context(|| format!("configuration file {}", Path::new(&path).display()))?;
    let mut out = argv[..=at].to_vec();
    out.extend(extra);
    out.extend_from_slice(&argv[at + 1..]);
    Ok(out)
}

fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            return Some(v.into());
        }
    }
    None
}

/// The file's settings as flags, leaving out those `given` sets.
fn settings(path: &Path, given: &[OsString]) -> Result<Vec<OsString>> {
    let text = calliper_store::files::read_small(path, MAX_BYTES).context(
        "cannot read it as a configuration file (a regular file of UTF-8 text, at most 1 MiB)",
    )?;
    let table: toml::Table = text.parse().context("not valid TOML")?;
    let cmd = crate::command_line();
    let probe = cmd.find_subcommand("probe").context("no probe command (a bug)")?;
    let known: Vec<(String, Option<char>, bool)> = probe
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            let flag = is_switch(a);
            (!NOT_IN_FILE.contains(&long.as_str())).then_some((long, a.get_short(), flag))
        })
        .collect();
    let mut out = Vec::new();
    for (key, value) in &table {
        let name = key.replace('_', "-");
        let Some((long, _, flag)) = known.iter().find(|(l, _, _)| *l == name) else {
            let mut names: Vec<&str> = known.iter().map(|(l, _, _)| l.as_str()).collect();
            names.sort_unstable();
            bail!("unknown key `{key}` (the keys are: {})", names.join(", "));
        };
        if overridden(probe, given, long) {
            continue;
        }
        let scalar = |v: &toml::Value| -> Result<String> {
            Ok(match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                _ => bail!("`{key}` must be a string or a number, or a list of them"),
            })
        };
        match (value, flag) {
            (toml::Value::Boolean(true), true) => out.push(format!("--{long}").into()),
            (toml::Value::Boolean(false), true) => {}
            (_, true) => bail!("`{key}` is a switch: true or false"),
            (toml::Value::Array(items), false) => {
                for v in items {
                    out.push(format!("--{long}={}", scalar(v)?).into());
                }
            }
            (v, false) => out.push(format!("--{long}={}", scalar(v)?).into()),
        }
    }
    Ok(out)
}

/// Whether the command line (`given`) overrides the setting `long`:
/// directly, or by giving a flag that conflicts with it (`--read` against
/// the file's `interface`).
fn overridden(probe: &clap::Command, given: &[OsString], long: &str) -> bool {
    let on_command_line = |long: &str, short: Option<char>| {
        given.iter().any(|a| {
            let a = a.to_string_lossy();
            a == format!("--{long}")
                || a.starts_with(&format!("--{long}="))
                || short.is_some_and(|s| a.starts_with(&format!("-{s}")) && !a.starts_with("--"))
        })
    };
    let Some(arg) = probe.get_arguments().find(|a| a.get_long() == Some(long)) else {
        return false;
    };
    let given_arg = |a: &clap::Arg| a.get_long().is_some_and(|l| on_command_line(l, a.get_short()));
    // Conflicts are declared on one side: look both ways.
    given_arg(arg)
        || probe.get_arg_conflicts_with(arg).iter().any(|c| given_arg(c))
        || probe.get_arguments().any(|b| {
            given_arg(b)
                && probe.get_arg_conflicts_with(b).iter().any(|c| c.get_id() == arg.get_id())
        })
}

/// A flag that takes no value (its key is true or false).
fn is_switch(a: &clap::Arg) -> bool {
    matches!(a.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::SetFalse)
}

/// A setting's value as TOML that `settings` reads back as the same text:
/// a switch's true or false; a number only where the reader's number-to-
/// text gives the text again (`1.50` or `010` would not: strings); else a
/// string.
fn toml_value(v: &str, switch: bool) -> String {
    let integer = v.parse::<i64>().is_ok_and(|i| i.to_string() == v);
    let float =
        v.contains('.') && v.parse::<f64>().is_ok_and(|f| f.is_finite() && f.to_string() == v);
    if switch || integer || float {
        v.to_string()
    } else {
        toml::Value::String(v.to_string()).to_string()
    }
}

/// The probe's effective settings as a configuration file that reads back:
/// what was set as keys, the defaults commented (`--check-config` prints
/// this).
pub fn effective(argv: &[OsString]) -> Result<String> {
    let matches = crate::command_line().try_get_matches_from(argv)?;
    let (_, probe) = matches
        .subcommand()
        .filter(|(name, _)| *name == "probe")
        .context("not the probe command")?;
    let cmd = crate::command_line();
    let probe_cmd = cmd.find_subcommand("probe").context("no probe command (a bug)")?;
    let mut out = String::new();
    for arg in probe_cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_IN_FILE.contains(&long) {
            continue;
        }
        let Some(raw) = probe.get_raw(arg.get_id().as_str()) else {
            out += &format!("# {long} (not set)\n");
            continue;
        };
        let switch = is_switch(arg);
        let vals = raw.map(|v| Some(toml_value(v.to_str()?, switch))).collect::<Option<Vec<_>>>();
        let Some(vals) = vals else {
            // TOML holds text only: a lossy copy would name another file.
            eprintln!("calliper: warning: a value of --{long} is not UTF-8: the printed configuration leaves it out");
            out += &format!("# {long}: a value that is not UTF-8 cannot be written here\n");
            continue;
        };
        let many = matches!(arg.get_action(), clap::ArgAction::Append)
            || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let setting = if many {
            format!("{long} = [{}]", vals.join(", "))
        } else {
            format!("{long} = {}", vals.join(", "))
        };
        // A default is shown commented: given as a key, some would call
        // for others (hep-id for --hep), and the output must read back.
        let default = probe.value_source(arg.get_id().as_str()) == Some(ValueSource::DefaultValue);
        out += &if default { format!("# {setting} (default)\n") } else { format!("{setting}\n") };
    }
    Ok(out)
}
