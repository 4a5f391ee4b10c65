// SPDX-License-Identifier: Apache-2.0
//! The distributions of Filebench's custom variables (`cvar(type=cvar-…)`):
//! their parameters, defaults and draws. Parameter names and defaults are
//! those of Filebench's cvar library; a draw below zero (possible for
//! `normal`) is a size of 0.

use crate::rng::Rng;

/// One distribution, parameters resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum Dist {
    /// `cvar-gamma`: mean, gamma (shape; Filebench's default 1.5).
    Gamma { mean: f64, shape: f64 },
    /// `cvar-uniform`: lower (0), upper (1).
    Uniform { lower: f64, upper: f64 },
    /// `cvar-normal`: mean (0), sigma (1).
    Normal { mean: f64, sigma: f64 },
    /// `cvar-exponential`: mean (1).
    Exponential { mean: f64 },
    /// `cvar-erlang`: shape (1, an integer), rate (1).
    Erlang { shape: u32, rate: f64 },
    /// `cvar-lognormal`: shape (1), scale (1): exp(Normal(scale, shape)).
    LogNormal { shape: f64, scale: f64 },
    /// `cvar-triangular`: lower (0), upper (1), mode (0.5).
    Triangular { lower: f64, upper: f64, mode: f64 },
    /// `cvar-weibull`: shape (1), scale (1).
    Weibull { shape: f64, scale: f64 },
    /// `randvar(type=uniform)`: min + U × 2 (mean − min), as Filebench.
    RandUniform { min: f64, mean: f64, round: f64 },
    /// `randvar(type=gamma)`: min + Gamma(gamma/1000, (mean − min)/shape).
    RandGamma {
        min: f64,
        mean: f64,
        shape: f64,
        round: f64,
    },
    /// `randvar(type=tabular)`: 100 slots of (base, range), normalised to
    /// minimum 0 and mean 1, scaled to (mean − min) + min as Filebench.
    RandTable {
        min: f64,
        mean: f64,
        round: f64,
        slots: Vec<(f64, f64)>,
    },
}

/// A `randvar`: its `type` (uniform, gamma, tabular), `get(attr)` for
/// min, round, mean, gamma, and the rows of its `randtable`.
pub fn randvar(
    kind: &str,
    get: impl Fn(&str) -> Option<f64>,
    table: &[[f64; 3]],
) -> Result<Dist, String> {
    let min = get("min").unwrap_or(0.0);
    let round = get("round").unwrap_or(0.0);
    let shape = get("gamma").unwrap_or(1500.0) / 1000.0;
    // Filebench: without mean=, the mean is the gamma parameter (or, for a
    // table, the table's own mean).
    let mean = get("mean");
    match kind {
        "uniform" => Ok(Dist::RandUniform {
            min,
            mean: mean.unwrap_or(shape),
            round,
        }),
        "gamma" if shape > 0.0 => Ok(Dist::RandGamma {
            min,
            mean: mean.unwrap_or(shape),
            shape,
            round,
        }),
        "gamma" => Err("randvar gamma must be > 0".into()),
        "tabular" => table_dist(min, mean, round, table),
        other => Err(format!(
            "unknown randvar type '{other}' (uniform, gamma, tabular)"
        )),
    }
}

fn table_dist(min: f64, mean: Option<f64>, round: f64, rows: &[[f64; 3]]) -> Result<Dist, String> {
    let mut slots = Vec::with_capacity(100);
    let (mut table_sum, mut table_min) = (0.0, f64::INFINITY);
    for &[pct, lo, hi] in rows {
        if hi < lo {
            return Err(format!(
                "randtable row {{{pct}, {lo}, {hi}}}: max below min"
            ));
        }
        table_min = table_min.min(lo);
        table_sum += (lo + hi) / 2.0 * pct;
        for _ in 0..pct.round() as usize {
            slots.push((lo, hi - lo));
        }
    }
    if slots.len() != 100 {
        return Err(format!(
            "randtable percentages total {}, not 100",
            slots.len()
        ));
    }
    let mean = mean.unwrap_or(table_sum / 100.0);
    let spread = table_sum / 100.0 - table_min;
    for s in &mut slots {
        *s = if spread == 0.0 {
            (0.0, 0.0)
        } else {
            ((s.0 - table_min) / spread, s.1 / spread)
        };
    }
    Ok(Dist::RandTable {
        min,
        mean,
        round,
        slots,
    })
}

fn round_to(v: f64, round: f64) -> f64 {
    if round > 0.0 {
        (v / round).round() * round
    } else {
        v
    }
}

/// Every cvar type with its parameter names.
pub const TYPES: &[(&str, &[&str])] = &[
    ("cvar-gamma", &["mean", "gamma"]),
    ("cvar-uniform", &["lower", "upper"]),
    ("cvar-normal", &["mean", "sigma"]),
    ("cvar-exponential", &["mean"]),
    ("cvar-erlang", &["shape", "rate"]),
    ("cvar-lognormal", &["shape", "scale"]),
    ("cvar-triangular", &["lower", "upper", "mode"]),
    ("cvar-weibull", &["shape", "scale"]),
];

/// The parameter names of cvar type `kind`, if it is one.
pub fn params_of(kind: &str) -> Option<&'static [&'static str]> {
    TYPES.iter().find(|(k, _)| *k == kind).map(|(_, p)| *p)
}

impl Dist {
    /// Builds `kind` from `get(name)` (None: the default). `Err` names what
    /// is out of range.
    pub fn build(kind: &str, get: impl Fn(&str) -> Option<f64>) -> Result<Dist, String> {
        let p = |name: &str, default: f64| get(name).unwrap_or(default);
        let d = match kind {
            "cvar-gamma" => Dist::Gamma {
                mean: get("mean").ok_or("cvar-gamma needs mean")?,
                shape: p("gamma", 1.5),
            },
            "cvar-uniform" => Dist::Uniform {
                lower: p("lower", 0.0),
                upper: p("upper", 1.0),
            },
            "cvar-normal" => Dist::Normal {
                mean: p("mean", 0.0),
                sigma: p("sigma", 1.0),
            },
            "cvar-exponential" => Dist::Exponential {
                mean: p("mean", 1.0),
            },
            "cvar-erlang" => Dist::Erlang {
                shape: p("shape", 1.0).round().clamp(1.0, 1e6) as u32,
                rate: p("rate", 1.0),
            },
            "cvar-lognormal" => Dist::LogNormal {
                shape: p("shape", 1.0),
                scale: p("scale", 1.0),
            },
            "cvar-triangular" => Dist::Triangular {
                lower: p("lower", 0.0),
                upper: p("upper", 1.0),
                mode: p("mode", 0.5),
            },
            "cvar-weibull" => Dist::Weibull {
                shape: p("shape", 1.0),
                scale: p("scale", 1.0),
            },
            other => return Err(format!("unknown cvar type '{other}'")),
        };
        d.check()?;
        Ok(d)
    }

    fn check(&self) -> Result<(), String> {
        let ok = match *self {
            Dist::Gamma { mean, shape } => mean >= 0.0 && shape > 0.0,
            Dist::Uniform { lower, upper } => lower <= upper,
            Dist::Normal { sigma, .. } => sigma >= 0.0,
            Dist::Exponential { mean } => mean > 0.0,
            Dist::Erlang { rate, .. } => rate > 0.0,
            Dist::LogNormal { shape, .. } => shape >= 0.0,
            Dist::Triangular { lower, upper, mode } => lower <= mode && mode <= upper,
            Dist::Weibull { shape, scale } => shape > 0.0 && scale > 0.0,
            Dist::RandUniform { .. } | Dist::RandGamma { .. } | Dist::RandTable { .. } => true,
        };
        if !ok {
            return Err(format!("{self:?}: parameters out of range"));
        }
        Ok(())
    }

    /// One draw (a real number; sizes round it and stop at 0).
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match *self {
            Dist::Gamma { mean, shape } => rng.gamma(shape, mean / shape),
            Dist::Uniform { lower, upper } => lower + (upper - lower) * rng.uniform(),
            Dist::Normal { mean, sigma } => mean + sigma * rng.normal(),
            Dist::Exponential { mean } => -mean * (1.0 - rng.uniform()).ln(),
            Dist::Erlang { shape, rate } => {
                (0..shape).map(|_| -(1.0 - rng.uniform()).ln()).sum::<f64>() / rate
            }
            Dist::LogNormal { shape, scale } => (scale + shape * rng.normal()).exp(),
            Dist::Triangular { lower, upper, mode } => {
                let u = rng.uniform();
                let span = upper - lower;
                if span <= 0.0 {
                    return lower;
                }
                let cut = (mode - lower) / span;
                if u < cut {
                    lower + (u * span * (mode - lower)).sqrt()
                } else {
                    upper - ((1.0 - u) * span * (upper - mode)).sqrt()
                }
            }
            Dist::Weibull { shape, scale } => {
                scale * (-(1.0 - rng.uniform()).ln()).powf(1.0 / shape)
            }
            Dist::RandUniform { min, mean, round } => {
                round_to(rng.uniform() * 2.0 * (mean - min) + min, round)
            }
            Dist::RandGamma {
                min,
                mean,
                shape,
                round,
            } => round_to(rng.gamma(shape, (mean - min) / shape) + min, round),
            Dist::RandTable {
                min,
                mean,
                round,
                ref slots,
            } => {
                let p = rng.uniform() * 100.0;
                let idx = (p as usize).min(99);
                let (base, range) = slots.get(idx).copied().unwrap_or((0.0, 0.0));
                let v = base + range * (p - idx as f64);
                round_to(v * (mean - min) + min, round)
            }
        }
    }

    /// The distribution's mean.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Gamma { mean, .. } | Dist::Normal { mean, .. } | Dist::Exponential { mean } => {
                mean
            }
            Dist::Uniform { lower, upper } => (lower + upper) / 2.0,
            Dist::Erlang { shape, rate } => f64::from(shape) / rate,
            Dist::LogNormal { shape, scale } => (scale + shape * shape / 2.0).exp(),
            Dist::Triangular { lower, upper, mode } => (lower + upper + mode) / 3.0,
            Dist::Weibull { shape, scale } => {
                // Γ(1 + 1/k) by Stirling's series is close enough for a report.
                scale * gamma_fn(1.0 + 1.0 / shape)
            }
            Dist::RandUniform { mean, .. }
            | Dist::RandGamma { mean, .. }
            | Dist::RandTable { mean, .. } => mean,
        }
    }
}

/// Γ(x) for x ≥ 1 (Stirling's series with a shift; relative error < 1e-6).
fn gamma_fn(x: f64) -> f64 {
    let (mut x, mut f) = (x, 1.0);
    while x < 7.0 {
        f *= x;
        x += 1.0;
    }
    let s = (2.0 * std::f64::consts::PI / x).sqrt() * (x / std::f64::consts::E).powf(x);
    s * (1.0 + 1.0 / (12.0 * x) + 1.0 / (288.0 * x * x)) / f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_of(d: &Dist, n: usize) -> f64 {
        let mut rng = Rng::new(7);
        (0..n).map(|_| d.sample(&mut rng)).sum::<f64>() / n as f64
    }

    #[test]
    fn every_type_draws_around_its_mean() {
        let cases: &[(&str, &[(&str, f64)])] = &[
            ("cvar-gamma", &[("mean", 6144.0), ("gamma", 1.5)]),
            ("cvar-uniform", &[("lower", 4096.0), ("upper", 8192.0)]),
            ("cvar-normal", &[("mean", 6144.0), ("sigma", 100.0)]),
            ("cvar-exponential", &[("mean", 6144.0)]),
            ("cvar-erlang", &[("shape", 3.0), ("rate", 0.001)]),
            ("cvar-lognormal", &[("shape", 0.5), ("scale", 8.0)]),
            (
                "cvar-triangular",
                &[("lower", 0.0), ("upper", 9000.0), ("mode", 3000.0)],
            ),
            ("cvar-weibull", &[("shape", 2.0), ("scale", 5000.0)]),
        ];
        assert_eq!(cases.len(), TYPES.len());
        for (kind, params) in cases {
            let d = Dist::build(kind, |n| {
                params.iter().find(|(k, _)| *k == n).map(|(_, v)| *v)
            })
            .unwrap();
            let (want, got) = (d.mean(), mean_of(&d, 200_000));
            assert!(
                (got - want).abs() / want < 0.02,
                "{kind}: mean {got}, want {want}"
            );
        }
    }

    #[test]
    fn uniform_stays_in_range_and_defaults_apply() {
        let d = Dist::build("cvar-uniform", |n| match n {
            "lower" => Some(4096.0),
            "upper" => Some(8192.0),
            _ => None,
        })
        .unwrap();
        let mut rng = Rng::new(1);
        assert!((0..10_000).all(|_| (4096.0..8192.0).contains(&d.sample(&mut rng))));
        assert_eq!(
            Dist::build("cvar-triangular", |_| None).unwrap(),
            Dist::Triangular {
                lower: 0.0,
                upper: 1.0,
                mode: 0.5
            }
        );
        assert!(Dist::build("cvar-gamma", |_| None).is_err());
        assert!(Dist::build("cvar-uniform", |n| (n == "lower").then_some(9.0)).is_err());
        assert!(Dist::build("cvar-zipf", |_| None).is_err());
    }
}

#[cfg(test)]
mod randvar_tests {
    use super::*;

    #[test]
    fn a_table_draws_its_rows_in_proportion_and_rounds() {
        let rows = [
            [80.0, 1024.0, 4096.0],
            [15.0, 4096.0, 16384.0],
            [5.0, 16384.0, 65536.0],
        ];
        let d = randvar(
            "tabular",
            |n| match n {
                "min" => Some(1024.0),
                "round" => Some(1024.0),
                _ => None,
            },
            &rows,
        )
        .unwrap();
        let mut rng = Rng::new(3);
        let draws: Vec<f64> = (0..100_000).map(|_| d.sample(&mut rng)).collect();
        assert!(draws
            .iter()
            .all(|v| v % 1024.0 == 0.0 && (1024.0..=65536.0).contains(v)));
        let small = draws.iter().filter(|v| **v <= 4096.0).count() as f64 / 1e5;
        assert!(
            (0.78..0.83).contains(&small),
            "share in the first row {small}"
        );
        // Rows' midpoints weighted: 0.8 × 2.5k + 0.15 × 10k + 0.05 × 40k = 5.5k.
        let mean = draws.iter().sum::<f64>() / 1e5;
        assert!((mean - 5632.0).abs() < 200.0, "mean {mean}");
        assert!(randvar("tabular", |_| None, &[[50.0, 1.0, 2.0]]).is_err());
    }

    #[test]
    fn gamma_and_uniform_follow_filebench_formulas() {
        let g = randvar(
            "gamma",
            |n| match n {
                "gamma" => Some(1500.0),
                "mean" => Some(10_000.0),
                "min" => Some(1000.0),
                _ => None,
            },
            &[],
        )
        .unwrap();
        let u = randvar(
            "uniform",
            |n| match n {
                "mean" => Some(100.0),
                "min" => Some(50.0),
                _ => None,
            },
            &[],
        )
        .unwrap();
        let mut rng = Rng::new(9);
        let gm = (0..100_000).map(|_| g.sample(&mut rng)).sum::<f64>() / 1e5;
        assert!((gm - 10_000.0).abs() < 200.0, "gamma mean {gm}");
        let ud: Vec<f64> = (0..100_000).map(|_| u.sample(&mut rng)).collect();
        assert!(ud.iter().all(|v| (50.0..150.0).contains(v)));
        assert!(randvar("zipf", |_| None, &[]).is_err());
    }
}
