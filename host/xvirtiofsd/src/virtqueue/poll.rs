// SPDX-License-Identifier: Apache-2.0
//! The busy-event wait of the queue workers (XFUSE) and its policy.
//!
//! After serving a batch the worker keeps guest notifications suppressed and
//! polls the avail index for up to the poll window. If nothing arrives it
//! re-arms notifications, re-checks the ring (a request that landed just as
//! polling stopped is served, not lost), and only then sleeps on the kick
//! eventfd. `--poll adaptive` polls only while the observed gap between
//! requests is shorter than the poll window plus the measured cost of a
//! wake-up: beyond that, polling burns CPU for nothing. Nor does it spin on
//! a CPU another thread wants: a worker that the scheduler preempts again
//! and again while it polls (the guest's vCPU or another worker waiting for
//! that CPU) pauses polling, for 100 ms and up to 1.6 s if it keeps
//! happening, since every microsecond it spins is then taken from the
//! thread that would send it the next request.
//!
//! `--poll-cpu-max P` bounds what polling may cost: each worker earns P % of
//! the wall-clock time as polling credit (at most P % of [`BUDGET_PERIOD`]
//! banked) and never polls longer than its credit, so its spinning stays
//! within P % of a CPU whatever the traffic.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sys;
pub use virtio_fs_ext::config::PollMode;

/// Busy-wait settings shared by every worker.
#[derive(Debug, Clone, Copy)]
pub struct PollConfig {
    pub mode: PollMode,
    pub window: Duration,
    /// Measured cost of sleeping on an eventfd and being woken.
    pub wake_cost: Duration,
    /// Most CPU a worker may spend polling, in percent of wall-clock time
    /// (1-100; 100: no budget beyond the window).
    pub cpu_max: u8,
}

impl PollConfig {
    pub const NEVER: PollConfig = PollConfig {
        mode: PollMode::Never,
        window: Duration::ZERO,
        wake_cost: Duration::ZERO,
        cpu_max: 100,
    };
}

/// The period over which `--poll-cpu-max` is enforced: a worker banks at
/// most its share of this much polling credit.
pub const BUDGET_PERIOD: Duration = Duration::from_millis(100);

/// How often an adaptive worker counts its preemptions.
pub const CONTENTION_PERIOD: Duration = Duration::from_millis(10);
/// Preemptions per [`CONTENTION_PERIOD`] of a worker that polled which mean
/// another thread is waiting for its CPU (a timer or a stray kernel thread
/// takes it a few times a second; a vCPU sharing it, thousands).
const CONTENDED_SWITCHES: u64 = 4;
/// Polling time within a period below which its preemptions say nothing
/// about polling.
const POLLED_MIN: Duration = Duration::from_millis(1);
/// First and longest pause of polling after a contended period.
const PAUSE_MIN: Duration = Duration::from_millis(100);
const PAUSE_MAX: Duration = Duration::from_millis(1600);

/// Whether polling competes with other threads for the worker's CPU.
#[derive(Debug)]
struct Contention {
    checked_at: Instant,
    /// The thread's preemption count at `checked_at` (none before the first).
    switches: Option<u64>,
    /// Time spent polling since `checked_at`.
    polled_ns: u64,
    /// The next pause (doubles while contention persists).
    pause: Duration,
    paused_until: Option<Instant>,
    /// False once the count could not be read (the worker polls without
    /// this check rather than asking again every period).
    counting: bool,
}

/// The adaptive decision (an exponentially weighted mean of the idle gaps,
/// and contention for the CPU) and the CPU budget (polling credit earned
/// with wall-clock time).
#[derive(Debug)]
pub(crate) struct PollPolicy {
    cfg: PollConfig,
    gap_ewma_ns: u64,
    credit_ns: u64,
    credited_at: Instant,
    contention: Contention,
}

impl PollPolicy {
    pub(crate) fn new(cfg: PollConfig) -> Self {
        let now = Instant::now();
        PollPolicy {
            cfg,
            gap_ewma_ns: 0,
            credit_ns: Self::credit_cap(cfg),
            credited_at: now,
            contention: Contention {
                checked_at: now,
                switches: None,
                polled_ns: 0,
                pause: PAUSE_MIN,
                paused_until: None,
                counting: true,
            },
        }
    }

    /// True when the worker should count its preemptions now and pass the
    /// count to [`PollPolicy::observe_switches`] (adaptive polling only).
    pub(crate) fn wants_switch_count(&self, now: Instant) -> bool {
        self.cfg.mode == PollMode::Adaptive
            && !self.cfg.window.is_zero()
            && self.contention.counting
            && now.saturating_duration_since(self.contention.checked_at) >= CONTENTION_PERIOD
    }

    /// Takes the worker thread's preemption count so far: if it was
    /// preempted often while it polled since the last count, polling pauses.
    pub(crate) fn observe_switches(&mut self, now: Instant, total: u64) {
        let c = &mut self.contention;
        c.checked_at = now;
        let polled = std::mem::take(&mut c.polled_ns);
        let Some(last) = c.switches.replace(total) else {
            return;
        };
        if polled < POLLED_MIN.as_nanos() as u64 {
            return;
        }
        // At least CONTENDED_SWITCHES, and as many per CONTENTION_PERIOD
        // of polling (a count may span more than one period).
        let n = total.saturating_sub(last);
        let per_period = u128::from(n) * CONTENTION_PERIOD.as_nanos() / u128::from(polled);
        if n >= CONTENDED_SWITCHES && per_period >= u128::from(CONTENDED_SWITCHES) {
            c.paused_until = Some(now + c.pause);
            c.pause = (c.pause * 2).min(PAUSE_MAX);
        } else {
            c.pause = PAUSE_MIN;
        }
    }

    /// The preemption count cannot be read: stop asking for it.
    pub(crate) fn stop_counting(&mut self) {
        self.contention.counting = false;
    }

    fn paused(&self, now: Instant) -> bool {
        self.contention.paused_until.is_some_and(|t| now < t)
    }

    fn credit_cap(cfg: PollConfig) -> u64 {
        BUDGET_PERIOD.as_nanos() as u64 * u64::from(cfg.cpu_max.min(100)) / 100
    }

    /// How long to poll now: zero when polling does not pay or the budget
    /// is spent, else the window, cut to the credit left.
    pub(crate) fn window_at(&mut self, now: Instant) -> Duration {
        if !self.should_poll() || self.paused(now) {
            return Duration::ZERO;
        }
        if self.cfg.cpu_max >= 100 {
            return self.cfg.window;
        }
        let earned = now.saturating_duration_since(self.credited_at).as_nanos() as u64
            * u64::from(self.cfg.cpu_max)
            / 100;
        self.credited_at = now;
        self.credit_ns = self
            .credit_ns
            .saturating_add(earned)
            .min(Self::credit_cap(self.cfg));
        self.cfg.window.min(Duration::from_nanos(self.credit_ns))
    }

    /// Charges time spent polling against the budget.
    pub(crate) fn spend(&mut self, polled: Duration) {
        let ns = polled.as_nanos() as u64;
        self.credit_ns = self.credit_ns.saturating_sub(ns);
        self.contention.polled_ns = self.contention.polled_ns.saturating_add(ns);
    }

    fn threshold_ns(&self) -> u64 {
        (self.cfg.window + self.cfg.wake_cost).as_nanos() as u64
    }

    fn should_poll(&self) -> bool {
        match self.cfg.mode {
            PollMode::Never => false,
            PollMode::Always => !self.cfg.window.is_zero(),
            PollMode::Adaptive => {
                !self.cfg.window.is_zero() && self.gap_ewma_ns <= self.threshold_ns()
            }
        }
    }

    /// Records the idle time before the latest batch arrived. Long idle
    /// periods are capped so that polling resumes a few requests into a burst.
    pub(crate) fn observe_gap(&mut self, gap: Duration) {
        let cap = self.threshold_ns().saturating_mul(16).max(1);
        let g = (gap.as_nanos() as u64).min(cap);
        self.gap_ewma_ns = self.gap_ewma_ns - self.gap_ewma_ns / 4 + g / 4;
    }
}

/// Measures the cost of waking a thread sleeping on an eventfd (half an
/// eventfd ping-pong round trip, median of `rounds`).
pub fn measure_wake_cost(rounds: usize) -> Duration {
    let (Ok(a), Ok(b)) = (sys::eventfd(), sys::eventfd()) else {
        return Duration::from_micros(20);
    };
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
    let echo = std::thread::spawn(move || {
        for _ in 0..rounds {
            if sys::poll_readable(&[a2.as_fd()], 1000).is_err() {
                return;
            }
            let _ = sys::eventfd_drain(a2.as_fd());
            let _ = sys::eventfd_signal(b2.as_fd());
        }
    });
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let _ = sys::eventfd_signal(a.as_fd());
        if sys::poll_readable(&[b.as_fd()], 1000).is_err() {
            break;
        }
        let _ = sys::eventfd_drain(b.as_fd());
        samples.push(t.elapsed() / 2);
    }
    let _ = echo.join();
    samples.sort();
    samples
        .get(samples.len() / 2)
        .copied()
        .unwrap_or(Duration::from_micros(20))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mode: PollMode) -> PollConfig {
        PollConfig {
            mode,
            window: Duration::from_micros(50),
            wake_cost: Duration::from_micros(10),
            cpu_max: 100,
        }
    }

    #[test]
    fn the_cpu_budget_bounds_polling_to_its_share_of_wall_time() {
        let mut p = PollPolicy::new(PollConfig {
            cpu_max: 10,
            ..cfg(PollMode::Always)
        });
        let t0 = p.credited_at;
        // Poll back to back for one simulated second, each poll using all
        // it is given, with 1 µs of serving between polls.
        let (mut now, mut polled) = (t0, Duration::ZERO);
        while now < t0 + Duration::from_secs(1) {
            let w = p.window_at(now);
            p.spend(w);
            polled += w;
            now += w + Duration::from_micros(1);
        }
        // 10 % of 1 s earned, plus the 10 ms banked at the start.
        let most = Duration::from_millis(100) + BUDGET_PERIOD / 10;
        assert!(polled <= most, "polled {polled:?} > {most:?}");
        assert!(polled >= Duration::from_millis(90), "polled {polled:?}");
        // Idle for a second: the credit is capped, not a second's worth.
        let w = p.window_at(now + Duration::from_secs(1));
        assert_eq!(
            w,
            Duration::from_micros(50),
            "the window still caps one poll"
        );
        assert_eq!(p.credit_ns, BUDGET_PERIOD.as_nanos() as u64 / 10);
    }

    #[test]
    fn without_a_budget_the_window_is_given_whole() {
        let mut p = PollPolicy::new(cfg(PollMode::Always));
        for _ in 0..10_000 {
            let w = p.window_at(Instant::now());
            assert_eq!(w, Duration::from_micros(50));
            p.spend(w);
        }
        let mut never = PollPolicy::new(cfg(PollMode::Never));
        assert_eq!(never.window_at(Instant::now()), Duration::ZERO);
    }

    #[test]
    fn adaptive_stops_polling_on_slow_arrivals_and_resumes_on_fast_ones() {
        let mut p = PollPolicy::new(cfg(PollMode::Adaptive));
        assert!(p.should_poll(), "polls until it has seen the traffic");
        for _ in 0..20 {
            p.observe_gap(Duration::from_millis(5));
        }
        assert!(!p.should_poll(), "5 ms gaps are far beyond 60 µs");
        let mut n = 0;
        while !p.should_poll() {
            p.observe_gap(Duration::from_micros(5));
            n += 1;
            assert!(n < 64, "must resume within a short burst");
        }
    }

    /// Polls for `polled` and then counts `switches` preemptions, one
    /// period after the previous count.
    fn period(p: &mut PollPolicy, now: &mut Instant, polled: Duration, switches: &mut u64, n: u64) {
        p.spend(polled);
        *now += CONTENTION_PERIOD;
        *switches += n;
        assert!(p.wants_switch_count(*now));
        p.observe_switches(*now, *switches);
    }

    #[test]
    fn adaptive_pauses_polling_while_another_thread_wants_its_cpu() {
        let mut p = PollPolicy::new(cfg(PollMode::Adaptive));
        let (mut now, mut sw) = (p.contention.checked_at, 100);
        p.observe_switches(now, sw); // the first count is the reference
        let busy = Duration::from_millis(5);
        // A stray preemption or two per period: keep polling.
        for _ in 0..5 {
            period(&mut p, &mut now, busy, &mut sw, 2);
            assert!(!p.window_at(now).is_zero());
        }
        // Preempted 40 times while polling: pause for 100 ms.
        period(&mut p, &mut now, busy, &mut sw, 40);
        assert!(p.window_at(now).is_zero());
        assert!(p.window_at(now + Duration::from_millis(99)).is_zero());
        now += Duration::from_millis(100);
        assert!(!p.window_at(now).is_zero(), "resumes after the pause");
        // Still contended: the next pause is twice as long, up to 1.6 s.
        period(&mut p, &mut now, busy, &mut sw, 40);
        assert!(p.window_at(now + Duration::from_millis(199)).is_zero());
        for _ in 0..6 {
            now += Duration::from_secs(2);
            period(&mut p, &mut now, busy, &mut sw, 40);
        }
        assert!(p.window_at(now + Duration::from_millis(1599)).is_zero());
        assert!(!p.window_at(now + Duration::from_millis(1600)).is_zero());
        // A quiet period while polling resets the pause to 100 ms.
        now += Duration::from_millis(1600);
        period(&mut p, &mut now, busy, &mut sw, 0);
        period(&mut p, &mut now, busy, &mut sw, 40);
        assert!(!p.window_at(now + Duration::from_millis(100)).is_zero());
    }

    #[test]
    fn preemptions_while_hardly_polling_do_not_pause_it() {
        let mut p = PollPolicy::new(cfg(PollMode::Adaptive));
        let (mut now, mut sw) = (p.contention.checked_at, 0);
        p.observe_switches(now, sw);
        // Preempted while serving or asleep, not while polling.
        period(&mut p, &mut now, Duration::from_micros(200), &mut sw, 40);
        assert!(!p.window_at(now).is_zero());
        // 40 preemptions over half a second of polling are a stray few
        // per period.
        p.spend(Duration::from_millis(500));
        now += Duration::from_secs(1);
        sw += 40;
        p.observe_switches(now, sw);
        assert!(!p.window_at(now).is_zero());
    }

    #[test]
    fn only_adaptive_polling_counts_preemptions() {
        let later = Instant::now() + CONTENTION_PERIOD * 2;
        for mode in [PollMode::Never, PollMode::Always] {
            assert!(!PollPolicy::new(cfg(mode)).wants_switch_count(later));
        }
        let zero = PollPolicy::new(PollConfig {
            window: Duration::ZERO,
            ..cfg(PollMode::Adaptive)
        });
        assert!(!zero.wants_switch_count(later));
        let mut adaptive = PollPolicy::new(cfg(PollMode::Adaptive));
        assert!(adaptive.wants_switch_count(later));
        adaptive.stop_counting();
        assert!(!adaptive.wants_switch_count(later));
        assert!(crate::sys::involuntary_switches().is_ok());
    }

    #[test]
    fn never_and_always_ignore_the_traffic() {
        let mut never = PollPolicy::new(cfg(PollMode::Never));
        let mut always = PollPolicy::new(cfg(PollMode::Always));
        for _ in 0..10 {
            never.observe_gap(Duration::from_micros(1));
            always.observe_gap(Duration::from_secs(1));
        }
        assert!(!never.should_poll());
        assert!(always.should_poll());
        let zero = PollPolicy::new(PollConfig {
            window: Duration::ZERO,
            ..cfg(PollMode::Always)
        });
        assert!(!zero.should_poll(), "a zero window never polls");
    }

    #[test]
    fn wake_cost_is_measured() {
        let c = measure_wake_cost(20);
        assert!(
            c > Duration::ZERO && c < Duration::from_millis(100),
            "{c:?}"
        );
    }
}
