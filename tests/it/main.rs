//! The integration tests, one binary: a module per feature, sharing the
//! mocks, the gateway harness (`common`) and the conformance checker.
//!
//! Run one feature with `cargo test --test it <module>::`.

// `std::env::set_var` is `unsafe` in edition 2024: the tests set the
// variables a config names (keys, credentials) before the gateway reads them.
#![allow(unsafe_code)]

mod common;
mod conformance;

mod adversarial;
mod alike_chats;
mod bounds_props;
mod chat_claims;
mod cli;
mod clients;
mod docs;
mod fallback;
mod fidelity;
mod gateway;
mod gateway_tools;
mod grounding;
mod key_policy;
mod keys;
mod limits;
mod live_views;
mod mcp_door;
mod mcp_servers;
mod messages;
mod natural_e2e;
mod natural_golden;
mod natural_history;
mod natural_props;
mod natural_python;
mod natural_request;
mod operations;
mod operators;
mod probe;
mod real_upstream;
mod rescue_corpus;
mod resilience;
mod responses;
mod round_trip;
mod secrets;
mod store_postgres;
mod structural_tags;
mod telemetry;
mod tenancy;
mod to_natural;
mod tool_search;
mod transcripts;
mod transcripts_page;
mod truthful;
mod upstream_models;
mod usage_over_time;
