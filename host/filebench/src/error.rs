// SPDX-License-Identifier: Apache-2.0
//! Errors of the runner: every one names the workload file and line.

use std::fmt;

/// A construct the runner cannot parse or cannot run, at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

impl ParseError {
    pub fn new(file: &str, line: usize, msg: impl Into<String>) -> Self {
        ParseError {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// Errors of loading and running a workload.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The workload text is malformed or uses something the runner cannot run.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Reading the workload file failed.
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A statement failed while it ran (`file:line: what`).
    #[error("{file}:{line}: {msg}")]
    Run {
        file: String,
        line: usize,
        msg: String,
    },
    /// Writing the JSON result failed.
    #[error("cannot write {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn run(file: &str, line: usize, msg: impl Into<String>) -> Self {
        Error::Run {
            file: file.to_string(),
            line,
            msg: msg.into(),
        }
    }
}
