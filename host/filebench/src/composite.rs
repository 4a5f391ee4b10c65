// SPDX-License-Identifier: Apache-2.0
//! Composite flowops (`define flowop name=N, $p { flowop … }`): the parser
//! expands each use into a [`FlowopKind::Composite`] marker, the body with
//! the call's `$p=value` bindings substituted, and a
//! [`FlowopKind::CompositeEnd`] marker; the thread repeats the body
//! `iters` times (Filebench's composite flowop), and the end marker counts
//! one pass.

use crate::ast::{Attr, Attrs, Expr, FlowopDef, FlowopKind};

/// A composite flowop as defined.
#[derive(Debug, Clone, PartialEq)]
pub struct Composite {
    pub name: String,
    /// Its `$` parameters, without the `$`.
    pub params: Vec<String>,
    /// Its body, composite calls inside already expanded.
    pub body: Vec<FlowopDef>,
}

/// The flowops of one use of `c` on line `line` with `attrs` (`name`,
/// `iters`, and `$param=value` bindings).
pub fn expand(c: &Composite, line: usize, attrs: Attrs) -> Vec<FlowopDef> {
    let mut bindings: Vec<(String, Expr)> = Vec::new();
    let mut marker = Vec::new();
    for a in attrs.0 {
        match a.name.strip_prefix('$') {
            Some(p) => {
                if let Some(v) = a.value {
                    bindings.push((p.to_string(), v));
                }
            }
            None => marker.push(a),
        }
    }
    let name_only: Vec<Attr> = marker
        .iter()
        .filter(|a| a.name == "name")
        .cloned()
        .collect();
    let mut out = vec![FlowopDef {
        line,
        kind: FlowopKind::Composite,
        attrs: Attrs(marker),
    }];
    for f in &c.body {
        let attrs = f
            .attrs
            .0
            .iter()
            .map(|a| Attr {
                name: a.name.clone(),
                value: a.value.as_ref().map(|v| substitute(v, &bindings)),
                line: a.line,
            })
            .collect();
        out.push(FlowopDef {
            line: f.line,
            kind: f.kind,
            attrs: Attrs(attrs),
        });
    }
    out.push(FlowopDef {
        line,
        kind: FlowopKind::CompositeEnd,
        attrs: Attrs(name_only),
    });
    out
}

/// `e` with every `$param` bound by the call replaced by its value.
fn substitute(e: &Expr, bindings: &[(String, Expr)]) -> Expr {
    match e {
        Expr::Var(v) => bindings
            .iter()
            .find(|(p, _)| p == v)
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| e.clone()),
        Expr::Binary { op, lhs, rhs } => Expr::Binary {
            op: *op,
            lhs: Box::new(substitute(lhs, bindings)),
            rhs: Box::new(substitute(rhs, bindings)),
        },
        Expr::Cvar { kind, params } => Expr::Cvar {
            kind: kind.clone(),
            params: params
                .iter()
                .map(|(k, v)| (k.clone(), substitute(v, bindings)))
                .collect(),
        },
        Expr::Randvar { attrs, table } => Expr::Randvar {
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.clone(), substitute(v, bindings)))
                .collect(),
            table: table
                .iter()
                .map(|row| row.clone().map(|v| substitute(&v, bindings)))
                .collect(),
        },
        Expr::Word(_) | Expr::Str(_) => e.clone(),
    }
}
