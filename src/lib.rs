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
//!
//! The documented surface (every public item carries docs, `missing_docs`)
//! is what a program embedding the gateway uses: [`gateway`], [`server`],
//! [`runtime`], [`router`], [`exchange`], [`error`], [`inbound`], [`demo`].
//! The other modules are public so that the integration tests, benchmarks
//! and fuzz targets can reach the sans-IO parts; their items are documented
//! where it helps, not item by item.

#[allow(missing_docs)]
pub mod answer;
#[allow(missing_docs)]
pub mod api;
#[allow(missing_docs)]
pub mod body;
#[allow(missing_docs)]
pub mod commands;
#[allow(missing_docs)]
pub mod config;
pub mod demo;
pub mod error;
pub mod exchange;
pub mod gateway;
pub mod headers;
pub mod inbound;
pub mod json;
/// Keys an admin makes at run time, kept in the store.
pub mod keys;
/// Tenants' limits and budgets, in memory or in Redis.
pub mod limiter;
#[allow(missing_docs)]
pub mod log_writer;
pub mod memory;
#[allow(missing_docs)]
pub mod metrics;
#[allow(missing_docs)]
pub mod natural;
pub mod router;
pub mod runtime;
pub mod schema_example;
pub mod server;
#[allow(missing_docs)]
pub mod sse;
#[allow(missing_docs)]
pub mod store;
#[allow(missing_docs)]
pub mod telemetry;
#[allow(missing_docs)]
pub mod to_natural;
#[allow(missing_docs)]
pub mod tools;
#[allow(missing_docs)]
pub mod upstream;
pub mod workers;
