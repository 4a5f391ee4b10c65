// SPDX-License-Identifier: Apache-2.0
//! A small, seedable random number generator (xorshift64*) with the gamma
//! distribution Filebench draws file sizes, directory widths and depths from.

/// xorshift64* generator; one per thread, so no locking.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so that nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng { state: z | 1 }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((self.next_u64() as u128 * n as u128) >> 64) as u64
        }
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma(shape, scale): mean shape × scale (Marsaglia–Tsang; for
    /// shape < 1 the shape + 1 draw times U^(1/shape)).
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape <= 0.0 || scale <= 0.0 {
            return 0.0;
        }
        if shape < 1.0 {
            let u = 1.0 - self.uniform();
            return self.gamma(shape + 1.0, scale) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = 1.0 - self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_mean_matches() {
        for shape in [0.5, 1.5, 4.0] {
            let mut r = Rng::new(7);
            let n = 200_000;
            let mean: f64 = (0..n).map(|_| r.gamma(shape, 1000.0 / shape)).sum::<f64>() / n as f64;
            assert!((mean - 1000.0).abs() < 15.0, "shape {shape}: mean {mean}");
        }
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::new(1);
        assert!((0..10_000).all(|_| r.below(7) < 7));
        assert_eq!(r.below(0), 0);
    }
}
