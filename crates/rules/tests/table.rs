//! The rule table's decisions: kinds, priority, both directions, VLANs,
//! deletion, changes from another thread while lookups run, rule files.

use calliper_rules::{parse, Action, Filter, Flow, Rules, SipFacts};
use std::net::IpAddr;

fn flow(src: &str, sport: u16, dst: &str, dport: u16) -> Flow {
    Flow {
        vlan: None,
        protocol: 17,
        src: src.parse::<IpAddr>().unwrap(),
        dst: dst.parse::<IpAddr>().unwrap(),
        sport,
        dport,
    }
}

/// Inserts every rule of `text` (rule-file syntax).
fn rules(text: &str) -> Rules {
    let r = Rules::new();
    for (name, prio, filter, action) in parse(text).unwrap() {
        r.insert(&name, prio, filter, action).unwrap();
    }
    r
}

fn action(t: &calliper_rules::RuleTable, f: &Flow) -> Option<String> {
    t.lookup(f).map(|a| match a {
        Action::Label(l) => format!("label:{l}"),
        a => a.name().to_string(),
    })
}

#[test]
fn exact_rules_match_both_directions_and_only_their_flow() {
    let r = rules(
        r#"[[rule]]
protocol = "udp"
a = "10.0.0.1:5060"
b = "10.0.0.2:5062"
action = "ignore""#,
    );
    let t = r.table();
    assert_eq!(action(&t, &flow("10.0.0.1", 5060, "10.0.0.2", 5062)).as_deref(), Some("ignore"));
    assert_eq!(action(&t, &flow("10.0.0.2", 5062, "10.0.0.1", 5060)).as_deref(), Some("ignore"));
    assert_eq!(action(&t, &flow("10.0.0.1", 5062, "10.0.0.2", 5060)), None);
    let mut tcp = flow("10.0.0.1", 5060, "10.0.0.2", 5062);
    tcp.protocol = 6;
    assert_eq!(action(&t, &tcp), None);
    assert_eq!(r.list()[0].hits, 2);
}

#[test]
fn exact_rules_with_a_vlan_match_only_that_vlan() {
    let r = rules(
        r#"[[rule]]
protocol = "udp"
a = "10.0.0.1:5060"
b = "10.0.0.2:5060"
vlan = 100
action = "record""#,
    );
    let t = r.table();
    let mut f = flow("10.0.0.1", 5060, "10.0.0.2", 5060);
    assert_eq!(action(&t, &f), None);
    f.vlan = Some(100);
    assert_eq!(action(&t, &f).as_deref(), Some("record"));
    f.vlan = Some(101);
    assert_eq!(action(&t, &f), None);
}

#[test]
fn wildcard_rules_check_every_field() {
    let r = rules(
        r#"[[rule]]
src = "10.1.0.0/16"
dport = "10000-20000"
protocol = "udp"
action = "ignore"
[[rule]]
net = "2001:db8::/32"
action = "label"
label = "v6"
[[rule]]
port = 5080
action = "record""#,
    );
    let t = r.table();
    assert_eq!(action(&t, &flow("10.1.2.3", 4000, "8.8.8.8", 15000)).as_deref(), Some("ignore"));
    // Directional: the reverse packet comes from outside the network.
    assert_eq!(action(&t, &flow("8.8.8.8", 15000, "10.1.2.3", 4000)), None);
    assert_eq!(action(&t, &flow("10.1.2.3", 4000, "8.8.8.8", 20001)), None);
    // `net` matches either address.
    assert_eq!(action(&t, &flow("2001:db8::5", 1, "2001:dead::1", 2)).as_deref(), Some("label:v6"));
    assert_eq!(action(&t, &flow("2001:dead::1", 2, "2001:db8::5", 1)).as_deref(), Some("label:v6"));
    // A rule on ports alone.
    assert_eq!(action(&t, &flow("1.1.1.1", 5080, "2.2.2.2", 1)).as_deref(), Some("record"));
    assert_eq!(action(&t, &flow("1.1.1.1", 5081, "2.2.2.2", 1)), None);
}

#[test]
fn the_highest_priority_wins_then_the_oldest() {
    let r = rules(
        r#"[[rule]]
net = "10.0.0.0/8"
action = "ignore"
[[rule]]
net = "10.1.2.3/32"
priority = 5
action = "track"
[[rule]]
net = "10.1.2.0/24"
priority = 5
action = "record"
[[rule]]
protocol = "udp"
a = "10.9.9.9:1"
b = "10.9.9.8:2"
priority = -1
action = "record""#,
    );
    let t = r.table();
    assert_eq!(action(&t, &flow("10.1.2.3", 1, "1.1.1.1", 2)).as_deref(), Some("track"));
    assert_eq!(action(&t, &flow("10.1.2.4", 1, "1.1.1.1", 2)).as_deref(), Some("record"));
    assert_eq!(action(&t, &flow("10.7.0.1", 1, "1.1.1.1", 2)).as_deref(), Some("ignore"));
    // A lower-priority exact rule loses to a broader wildcard one.
    assert_eq!(action(&t, &flow("10.9.9.9", 1, "10.9.9.8", 2)).as_deref(), Some("ignore"));
}

#[test]
fn sip_rules_match_patterns_in_priority_order() {
    let r = rules(
        r#"[[rule]]
from_user = "+4420*"
action = "label"
label = "london"
[[rule]]
user_agent = "*yealink*"
method = "INVITE"
priority = 3
action = "record"
[[rule]]
to_domain = "*.example.com"
action = "ignore""#,
    );
    let t = r.table();
    let facts = |from_user, ua, to_domain| SipFacts {
        method: "INVITE",
        from_user: Some(from_user),
        to_domain: Some(to_domain),
        user_agent: ua,
        ..SipFacts::default()
    };
    let name = |a: Option<&Action>| a.map(|a| a.name());
    assert_eq!(name(t.lookup_sip(&facts("+442071", None, "x.org"))), Some("label"));
    assert_eq!(name(t.lookup_sip(&facts("+442071", Some("Yealink T46"), "x.org"))), Some("record"));
    assert_eq!(name(t.lookup_sip(&facts("1000", None, "pbx.EXAMPLE.com"))), Some("ignore"));
    assert_eq!(name(t.lookup_sip(&facts("1000", None, "example.com"))), None);
    let mut register = facts("1000", Some("Yealink"), "x.org");
    register.method = "REGISTER";
    assert_eq!(name(t.lookup_sip(&register)), None);
}

#[test]
fn deleted_rules_stop_matching_and_groups_empty_out() {
    let r = Rules::new();
    let (_, _, f, a) =
        parse("[[rule]]\nsrc = \"10.0.0.0/8\"\naction = \"ignore\"").unwrap().remove(0);
    let id = r.insert("", 0, f, a).unwrap();
    let mut t = r.table();
    assert!(!t.no_network_rules());
    assert!(r.delete(id));
    assert!(!r.delete(id));
    t.sync();
    assert!(t.no_network_rules());
    assert_eq!(action(&t, &flow("10.0.0.1", 1, "1.1.1.1", 1)), None);
}

#[test]
fn changes_reach_a_running_table_without_stopping_it() {
    let r = Rules::new();
    let mut t = r.table();
    let f = flow("192.0.2.1", 1000, "192.0.2.2", 2000);
    let control = r.clone();
    let writer = std::thread::spawn(move || {
        let mut ids = Vec::new();
        for i in 0..2000u32 {
            let filter = Filter::Exact(calliper_rules::ExactFilter {
                vlan: None,
                protocol: 17,
                a: (std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 1),
                b: ("10.255.255.255".parse().unwrap(), 2),
            });
            ids.push(control.insert("", 0, filter, Action::Ignore).unwrap());
        }
        let (_, _, filter, action) =
            parse("[[rule]]\nnet = \"192.0.2.0/24\"\naction = \"ignore\"").unwrap().remove(0);
        control.insert("last", 0, filter, action).unwrap();
    });
    // The packet thread looks up and syncs until the last rule arrives.
    let mut lookups = 0u64;
    while action(&t, &f).is_none() {
        t.sync();
        lookups += 1;
        assert!(lookups < 1 << 32, "the change never arrived");
    }
    writer.join().unwrap();
    t.sync();
    assert_eq!(r.len(), 2001);
    // A table made now starts with every rule.
    let late = r.table();
    assert_eq!(
        action(&late, &flow("10.0.7.207", 1, "10.255.255.255", 2)).as_deref(),
        Some("ignore")
    );
}

#[test]
fn bad_rules_are_refused_with_the_reason() {
    let err = |text: &str| parse(text).unwrap_err().to_string();
    assert!(err("[[rule]]\naction = \"ignore\"").contains("matches nothing in particular"));
    assert!(err("[[rule]]\nnet = \"10.0.0.0/8\"\naction = \"drop\"").contains("action `drop`"));
    assert!(err("[[rule]]\nnet = \"10.0.0.0/8\"\naction = \"label\"").contains("needs label"));
    assert!(err("[[rule]]\nnet = \"10.0.0.1/8\"").contains("host bits"));
    assert!(err("[[rule]]\nfrom_user = \"1*2\"").contains("may only start or end"));
    assert!(err("[[rule]]\nnet = \"10.0.0.0/8\"\nfrom_user = \"1\"").contains("not both"));
    assert!(err("[[rule]]\na = \"10.0.0.1:1\"\nb = \"10.0.0.2:2\"").contains("needs protocol"));
    assert!(err("[[rule]]\nnte = \"10.0.0.0/8\"").contains("unknown field"));
    // 65535 must not become the "any VLAN" key of exact rules.
    assert!(err(
        "[[rule]]\nprotocol = \"udp\"\na = \"10.0.0.1:1\"\nb = \"10.0.0.2:2\"\nvlan = 65535"
    )
    .contains("vlan must be 0 to 4095"));
    assert!(err("[[rule]]\nport = 70000").contains("port 70000 is not between 0 and 65535"));
    assert!(err("[[rule]]\nmethod = \"REGISTER\"").contains("only be \"INVITE\""));
    assert!(err("[[rule]]\nname = \"x\"\ndport = \"9-1\"").starts_with("rule 1 (x):"));
    // A duplicate exact flow (either direction) is refused.
    let r = rules("[[rule]]\nprotocol = \"udp\"\na = \"10.0.0.1:1\"\nb = \"10.0.0.2:2\"");
    let (_, _, f, a) =
        parse("[[rule]]\nprotocol = \"udp\"\na = \"10.0.0.2:2\"\nb = \"10.0.0.1:1\"")
            .unwrap()
            .remove(0);
    assert!(r.insert("", 0, f, a).unwrap_err().to_string().contains("already has this exact flow"));
}

/// A reload whose file the table refuses (two rules on one exact flow)
/// leaves the rules as they were; a FIFO is refused before it is opened.
#[test]
fn a_failed_reload_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("calliper-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    let one = "[[rule]]\nname = \"keep\"\nprotocol = \"udp\"\na = \"10.0.0.1:5060\"\nb = \"10.0.0.2:5060\"\naction = \"ignore\"\n";
    std::fs::write(&path, one).unwrap();
    let rules = calliper_rules::Rules::new();
    assert_eq!(calliper_rules::load_file(&path, &rules).unwrap(), 1);
    let twice = "[[rule]]\nprotocol = \"udp\"\na = \"10.0.0.3:5060\"\nb = \"10.0.0.4:5060\"\naction = \"ignore\"\n".repeat(2);
    std::fs::write(&path, twice).unwrap();
    assert!(calliper_rules::reload_file(&path, &rules).is_err());
    let left: Vec<String> = rules.list().into_iter().map(|r| r.name).collect();
    assert_eq!(left, vec!["keep".to_string()]);
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let e = calliper_rules::reload_file(&fifo, &rules).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    assert_eq!(rules.len(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn names_labels_and_crowded_networks_are_refused() {
    let err = |text: &str| parse(text).unwrap_err().to_string();
    assert!(err(&format!("[[rule]]\nname = \"{}\"\nport = 1", "n".repeat(65)))
        .contains("0 to 64 bytes"));
    assert!(err("[[rule]]\nport = 1\naction = \"label\"\nlabel = \"\"").contains("1 to 64 bytes"));
    assert!(err("[[rule]]\nname = \"a\\u202eb\"\nport = 1").contains("bidirectional"));
    assert!(err("[[rule]]\nport = 1\naction = \"label\"\nlabel = \"a\\nb\"").contains("control"));
    // Each wildcard rule on one network is tried for its packets: 64 at most.
    let r = Rules::new();
    let on = |port: u32| {
        parse(&format!("[[rule]]\nnet = \"198.18.0.0/15\"\ndport = {port}")).unwrap().remove(0)
    };
    let mut ids = Vec::new();
    for port in 0..calliper_rules::MAX_RULES_PER_NETWORK as u32 {
        let (_, _, f, a) = on(port);
        ids.push(r.insert("", 0, f, a).unwrap());
    }
    let (_, _, f, a) = on(9999);
    let e = r.insert("", 0, f.clone(), a.clone()).unwrap_err().to_string();
    assert!(e.contains("64 wildcard rules on 198.18.0.0/15"), "{e}");
    // Another network is not crowded; deleting one makes room.
    let (_, _, other, oa) = parse("[[rule]]\nnet = \"198.20.0.0/15\"").unwrap().remove(0);
    r.insert("", 0, other, oa).unwrap();
    assert!(r.delete(ids[0]));
    r.insert("", 0, f, a).unwrap();
}

#[test]
fn changes_a_quiet_table_has_not_applied_are_counted() {
    let r = rules("[[rule]]\nport = 1");
    let mut t = r.table();
    assert_eq!(r.pending_changes(), 0);
    for port in 2..12 {
        let (_, _, f, a) = parse(&format!("[[rule]]\nport = {port}")).unwrap().remove(0);
        r.insert("", 0, f, a).unwrap();
    }
    assert_eq!(r.pending_changes(), 10);
    t.sync();
    assert_eq!(r.pending_changes(), 0);
    assert_eq!(action(&t, &flow("10.0.0.1", 11, "10.0.0.2", 5)).as_deref(), Some("track"));
}
