//! Rule table costs at the sizes the framework issue names: 50 000 exact
//! rules and 1 000 wildcard rules (networks in four prefix-length shapes,
//! port ranges). `cargo bench -p calliper-rules`.

use calliper_rules::{
    Action, Cidr, ExactFilter, Filter, Flow, PortRange, RuleTable, Rules, WildFilter,
};
use std::net::{IpAddr, Ipv4Addr};

fn main() {
    divan::main();
}

const EXACT: u32 = 50_000;
const WILD: u32 = 1_000;

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

fn exact(i: u32) -> Filter {
    Filter::Exact(ExactFilter {
        vlan: None,
        protocol: 17,
        a: (ip(0x0a00_0000 + i), 5060),
        b: (ip(0x0b00_0000 + i), 5060),
    })
}

fn wild(i: u32) -> Filter {
    let net = |s: String| Some(Cidr::parse(&s).unwrap());
    let (a, b) = ((i >> 8) as u8, i as u8);
    let mut w = WildFilter::default();
    match i % 4 {
        0 => w.net = net(format!("172.{a}.{b}.0/24")),
        1 => {
            w.src = net(format!("100.{a}.{b}.0/24"));
            w.dport = Some(PortRange { lo: 10000, hi: 20000 });
        }
        2 => w.dst = net(format!("198.{a}.{b}.7/32")),
        _ => {
            w.src = net(format!("100.{}.0.0/16", i / 4));
            w.dst = net(format!("101.{}.0.0/16", i / 4));
        }
    }
    Filter::Wild(w)
}

/// Rules and a table holding 50 000 exact and 1 000 wildcard rules.
fn loaded() -> (Rules, RuleTable) {
    loaded_with(EXACT, WILD)
}

fn loaded_with(exacts: u32, wilds: u32) -> (Rules, RuleTable) {
    let rules = Rules::new();
    for i in 0..exacts {
        rules.insert("", 0, exact(i), Action::Track).unwrap();
    }
    for i in 0..wilds {
        rules.insert("", 1, wild(i), Action::Ignore).unwrap();
    }
    let table = rules.table();
    (rules, table)
}

/// Packets: a third hit exact rules, a third wildcard rules, a third nothing.
fn flows() -> Vec<Flow> {
    (0..3 * 1024u32)
        .map(|i| {
            let k = i / 3 * 48;
            let (src, dst, sport, dport) = match i % 3 {
                0 => (ip(0x0b00_0000 + k), ip(0x0a00_0000 + k), 5060, 5060),
                1 => (ip(0x6400_0000 + (k << 8) % (WILD << 8)), ip(0x0808_0808), 4000, 15000),
                _ => (ip(0xc0a8_0000 + k), ip(0xc0a9_0000 + k), 30000, 40000),
            };
            Flow { vlan: None, protocol: 17, src, dst, sport, dport }
        })
        .collect()
}

/// One lookup per packet, the mix of [`flows`].
#[divan::bench(sample_count = 1000, sample_size = 10000)]
fn lookup_50k_exact_1k_wildcard(b: divan::Bencher) {
    let (_rules, table) = loaded();
    let flows = flows();
    let mut i = 0;
    b.counter(divan::counter::ItemsCount::new(1usize)).bench_local(|| {
        i = (i + 1) % flows.len();
        divan::black_box(table.lookup(divan::black_box(&flows[i])).is_some())
    });
}

/// The same packets, 50 000 exact rules only.
#[divan::bench(sample_count = 1000, sample_size = 10000)]
fn lookup_50k_exact_only(b: divan::Bencher) {
    lookups(b, loaded_with(EXACT, 0).1);
}

/// The same packets, 1 000 wildcard rules only.
#[divan::bench(sample_count = 1000, sample_size = 10000)]
fn lookup_1k_wildcard_only(b: divan::Bencher) {
    lookups(b, loaded_with(0, WILD).1);
}

fn lookups(b: divan::Bencher, table: RuleTable) {
    let flows = flows();
    let mut i = 0;
    b.bench_local(|| {
        i = (i + 1) % flows.len();
        divan::black_box(table.lookup(divan::black_box(&flows[i])).is_some())
    });
}

/// Lookup with no rules: the cost an empty table adds to every packet.
#[divan::bench(sample_count = 1000, sample_size = 10000)]
fn lookup_empty(b: divan::Bencher) {
    lookups(b, Rules::new().table());
}

/// One insert and one delete at 50 000 exact and 1 000 wildcard rules,
/// each validated on the control side, sent, and applied by a packet
/// thread's table: the time of the pair.
#[divan::bench(sample_count = 1000, sample_size = 10)]
fn insert_and_delete_at_51k(b: divan::Bencher) {
    let (rules, mut table) = loaded();
    let mut n = 0;
    b.bench_local(|| {
        n += 1;
        let id = rules.insert("", 0, exact(EXACT + n), Action::Track).unwrap();
        table.sync();
        rules.delete(id);
        table.sync();
    });
}
