//! toolgate: an OpenAI-compatible gateway that can change how tool calling travels.
//!
//! A request comes in on [`server`], is routed by model ([`router`]) to a
//! provider from the [`config`], and is forwarded by [`gateway`] through
//! [`upstream`] (HTTP or the in-process [`demo`] model). With no transform the
//! response streams back byte for byte; in natural mode, [`natural`] rewrites
//! the request's tools into prompt text and the reply's text calls into
//! native `tool_calls`, using the sans-IO [`sse`] codec.
//!
//! Invariants: parsers and stream rewriters do no IO; the router is pure;
//! every error the gateway makes is a [`error::GatewayError`].

#![deny(unsafe_code)]

pub mod answer;
pub mod api;
pub mod body;
pub mod commands;
pub mod config;
pub mod demo;
pub mod error;
pub mod exchange;
pub mod gateway;
pub mod headers;
pub mod inbound;
pub mod json;
pub mod log_writer;
pub mod memory;
pub mod metrics;
pub mod natural;
pub mod router;
pub mod runtime;
pub mod schema_example;
pub mod server;
pub mod sse;
pub mod store;
pub mod telemetry;
pub mod to_natural;
pub mod tools;
pub mod upstream;
pub mod workers;
