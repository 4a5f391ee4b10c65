// SPDX-License-Identifier: Apache-2.0
//! `xfilebench`: a runner for Filebench's workload model language.
//!
//! It takes a Filebench `.f` file unchanged (`-f FILE.f`, `-D var=value` to
//! override its `$vars`), runs its processes as threads of one process, and
//! reports what Filebench reports (the per-flowop breakdown and the
//! `IO Summary:` line) plus a JSON result with latency percentiles and CPU
//! time. Anything it cannot run is an error naming the file, the line and the
//! construct.

pub mod aio;
pub mod ast;
pub mod composite;
pub mod dist;
pub mod engine;
pub mod error;
pub mod fileset;
pub mod flowop;
pub mod lexer;
pub mod limit;
pub mod parser;
pub mod result;
pub mod rng;
pub mod sem;
pub mod shared;
pub mod stats;
pub mod sys;
pub mod tick;
pub mod value;

pub use engine::{Engine, Options, RunResult};
pub use error::{Error, ParseError};
pub use parser::parse;
