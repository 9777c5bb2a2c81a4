//! Rules from a TOML file (`calliper analyze --rules FILE`). Each `[[rule]]`
//! table is one rule; its keys say which kind it is:
//!
//! ```toml
//! [[rule]]                       # wildcard: networks, port ranges, VLAN, transport
//! name = "lab"
//! net = "192.0.2.0/24"           # either address (src = / dst = for one direction)
//! action = "ignore"
//!
//! [[rule]]                       # exact flow, both directions
//! protocol = "udp"
//! a = "10.0.0.1:5060"
//! b = "10.0.0.2:5060"
//! action = "record"
//!
//! [[rule]]                       # SIP: once per call or registration
//! from_user = "+4420*"
//! action = "label"
//! label = "london"
//! priority = 10                  # highest wins; default 0
//! ```

use crate::{
    error, Action, Cidr, ExactFilter, Filter, Pattern, PortRange, RuleError, Rules, SipFilter,
    WildFilter,
};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// A port or range as a file gives it: `5060` or `"10000-20000"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Ports {
    One(i64),
    Text(String),
}

impl Ports {
    fn parse(&self) -> Result<PortRange, RuleError> {
        match self {
            Ports::One(p) => match u16::try_from(*p) {
                Ok(p) => Ok(PortRange { lo: p, hi: p }),
                Err(_) => error(format!("port {p} is not between 0 and 65535")),
            },
            Ports::Text(t) => PortRange::parse(t),
        }
    }
}

/// One `[[rule]]` of a file, before validation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    name: Option<String>,
    #[serde(default)]
    priority: i32,
    action: Option<String>,
    label: Option<String>,
    vlan: Option<u16>,
    protocol: Option<String>,
    a: Option<String>,
    b: Option<String>,
    src: Option<String>,
    dst: Option<String>,
    net: Option<String>,
    sport: Option<Ports>,
    dport: Option<Ports>,
    port: Option<Ports>,
    method: Option<String>,
    from_user: Option<String>,
    from_domain: Option<String>,
    to_user: Option<String>,
    to_domain: Option<String>,
    user_agent: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RuleSpec>,
}

/// The protocol number of `udp`, `tcp`, `sctp` or a number.
fn protocol_number(s: &str) -> Result<u8, RuleError> {
    match s.to_ascii_lowercase().as_str() {
        "udp" => Ok(17),
        "tcp" => Ok(6),
        "sctp" => Ok(132),
        n => n.parse().map_err(|_| {
            RuleError(format!("protocol `{s}`: say udp, tcp, sctp or an IP protocol number"))
        }),
    }
}

/// The name of a protocol number, as files spell it.
pub(crate) fn protocol_name(p: u8) -> String {
    match p {
        17 => "udp".into(),
        6 => "tcp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

fn endpoint(s: &str) -> Result<(std::net::IpAddr, u16), RuleError> {
    s.parse::<SocketAddr>().map(|a| (a.ip(), a.port())).map_err(|_| {
        RuleError(format!("`{s}` is not address:port (e.g. 10.0.0.1:5060 or [2001:db8::1]:5060)"))
    })
}

fn pattern(p: &Option<String>) -> Result<Option<Pattern>, RuleError> {
    p.as_deref().map(Pattern::parse).transpose()
}

impl RuleSpec {
    /// Validates the rule: its name, priority, filter and action.
    pub fn parts(&self) -> Result<(String, i32, Filter, Action), RuleError> {
        crate::check_text("rule name", self.name.as_deref().unwrap_or(""), false)?;
        if let Some(l) = &self.label {
            crate::check_text("label", l, true)?;
        }
        let action = self.action()?;
        let sip = [
            &self.method,
            &self.from_user,
            &self.from_domain,
            &self.to_user,
            &self.to_domain,
            &self.user_agent,
        ]
        .iter()
        .any(|k| k.is_some());
        let exact = self.a.is_some() || self.b.is_some();
        let wild = self.src.is_some()
            || self.dst.is_some()
            || self.net.is_some()
            || self.sport.is_some()
            || self.dport.is_some()
            || self.port.is_some();
        let network = exact || wild || self.vlan.is_some() || self.protocol.is_some();
        if self.vlan.is_some_and(|v| v > 4095) {
            return error("vlan must be 0 to 4095");
        }
        let filter = if sip {
            if network {
                return error("a rule matches SIP fields or the network, not both");
            }
            self.sip_filter()?
        } else if exact {
            if wild {
                return error(
                    "an exact flow (a, b) takes protocol and vlan only; use src/dst/net/ports for a wildcard rule",
                );
            }
            self.exact_filter()?
        } else if network {
            self.wild_filter()?
        } else {
            return error(
                "the rule matches nothing in particular: give network keys (net, src, dst, ports, vlan, protocol, a/b) or SIP keys (method, from_user, from_domain, to_user, to_domain, user_agent)",
            );
        };
        Ok((self.name.clone().unwrap_or_default(), self.priority, filter, action))
    }

    /// The action, `track` when none is named; a label only with `label`.
    fn action(&self) -> Result<Action, RuleError> {
        Ok(match (self.action.as_deref().unwrap_or("track"), &self.label) {
            ("label", Some(l)) => Action::Label(l.as_str().into()),
            ("label", None) => return error("action = \"label\" needs label = \"...\""),
            (_, Some(_)) => return error("label = is only for action = \"label\""),
            ("track", None) => Action::Track,
            ("ignore", None) => Action::Ignore,
            ("record", None) => Action::Record,
            (a, None) => return error(format!("action `{a}`: say track, ignore, record or label")),
        })
    }

    /// A SIP rule's filter: it applies to calls, so its method is INVITE.
    fn sip_filter(&self) -> Result<Filter, RuleError> {
        if self.method.as_deref().is_some_and(|m| m != "INVITE") {
            // (Also keeps an absurd method out of listings.)
            return error(
                "SIP rules apply to calls (their first INVITE): method can only be \"INVITE\"",
            );
        }
        Ok(Filter::Sip(SipFilter {
            method: self.method.clone(),
            from_user: pattern(&self.from_user)?,
            from_domain: pattern(&self.from_domain)?,
            to_user: pattern(&self.to_user)?,
            to_domain: pattern(&self.to_domain)?,
            user_agent: pattern(&self.user_agent)?,
        }))
    }

    /// An exact flow's filter: protocol and both ends.
    fn exact_filter(&self) -> Result<Filter, RuleError> {
        let (Some(a), Some(b), Some(p)) = (&self.a, &self.b, &self.protocol) else {
            return error("an exact flow needs protocol, a and b");
        };
        Ok(Filter::Exact(ExactFilter {
            vlan: self.vlan,
            protocol: protocol_number(p)?,
            a: endpoint(a)?,
            b: endpoint(b)?,
        }))
    }

    /// A wildcard rule's filter: prefixes, port ranges, VLAN and protocol.
    fn wild_filter(&self) -> Result<Filter, RuleError> {
        if self.net.is_some() && (self.src.is_some() || self.dst.is_some()) {
            return error("net matches either address: use it or src/dst, not both");
        }
        let cidr = |c: &Option<String>| c.as_deref().map(Cidr::parse).transpose();
        let ports = |p: &Option<Ports>| p.as_ref().map(Ports::parse).transpose();
        Ok(Filter::Wild(WildFilter {
            vlan: self.vlan,
            protocol: self.protocol.as_deref().map(protocol_number).transpose()?,
            src: cidr(&self.src)?,
            dst: cidr(&self.dst)?,
            net: cidr(&self.net)?,
            sport: ports(&self.sport)?,
            dport: ports(&self.dport)?,
            port: ports(&self.port)?,
        }))
    }
}

/// Largest rule file read (200 000 rules of about 80 bytes fit).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Parses rule-file text into validated rules (nothing inserted yet).
pub fn parse(text: &str) -> Result<Vec<(String, i32, Filter, Action)>, RuleError> {
    let file: RuleFile = toml::from_str(text).map_err(|e| RuleError(e.to_string()))?;
    let most = crate::MAX_NETWORK_RULES + crate::MAX_SIP_RULES;
    if file.rule.len() > most {
        return error(format!("{} rules: at most {most} are held", file.rule.len()));
    }
    file.rule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.parts().map_err(|e| {
                let name = r.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                RuleError(format!("rule {}{name}: {e}", i + 1))
            })
        })
        .collect()
}

/// Reads a rule file into `rules`: all of it or, on any error, none of it.
/// Returns how many rules it held.
pub fn load_file(path: &Path, rules: &Rules) -> Result<usize, RuleError> {
    insert_all(path, rules, read_file(path)?)
}

/// Replaces every rule with the file's (a probe's reload): a file with an
/// error — in its text or in a rule the table refuses — leaves the rules as
/// they were (their hit counts restart). Returns how many rules it held.
pub fn reload_file(path: &Path, rules: &Rules) -> Result<usize, RuleError> {
    let parsed = read_file(path)?;
    let old = rules.export();
    for r in rules.list() {
        rules.delete(r.id);
    }
    insert_all(path, rules, parsed).inspect_err(|_| {
        // `insert_all` took back what it inserted: put the old rules back.
        for (name, priority, filter, action) in old {
            let _ = rules.insert(&name, priority, filter, action);
        }
    })
}

type Parsed = Vec<(String, i32, Filter, Action)>;

fn read_file(path: &Path) -> Result<Parsed, RuleError> {
    use std::io::Read;
    let cannot = |e: std::io::Error| RuleError(format!("cannot read {}: {e}", path.display()));
    // A FIFO or device would block the reader (the probe's capture thread).
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return error(format!("{} is not a regular file", path.display()));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return error(format!(
            "{} is larger than {} MiB: not a rule file",
            path.display(),
            MAX_FILE_BYTES >> 20
        ));
    }
    parse(&text).map_err(|e| RuleError(format!("{}: {e}", path.display())))
}

fn insert_all(path: &Path, rules: &Rules, parsed: Parsed) -> Result<usize, RuleError> {
    let mut ids = Vec::new();
    for (i, (name, priority, filter, action)) in parsed.into_iter().enumerate() {
        match rules.insert(&name, priority, filter, action) {
            Ok(id) => ids.push(id),
            Err(e) => {
                for id in ids {
                    rules.delete(id);
                }
                return error(format!("{}: rule {}: {e}", path.display(), i + 1));
            }
        }
    }
    Ok(ids.len())
}
