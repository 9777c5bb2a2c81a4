//! The command line's tests that read captures and write files only: no
//! live capture, network namespace, browser, real-time peer or counting
//! allocator (those keep binaries of their own). One binary, so the suite
//! links it once: .

#[path = "../common/mod.rs"]
mod common;
#[path = "../console/server.rs"]
mod server;

mod alerts;
mod callpcap;
mod callpcap_export;
mod callpcap_hold;
mod calls;
mod captures;
mod console;
mod console_hostile;
mod console_lists;
mod console_live;
mod console_probe;
mod console_round3;
mod crtp;
mod daily;
mod example_tracker;
mod export;
mod flood;
mod generate;
mod hep_out;
mod hostile;
mod hostile_files;
mod hostile_numbers;
mod kpi;
mod probe_config;
mod registrations;
mod rules;
mod stored_fields;
mod time_jumps;
mod traffic;
mod wrong_input;
