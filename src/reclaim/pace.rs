//! How fast one provider is called during a reclaim: politely, so that a `stop --all` of
//! hundreds of sandboxes does not eat the rate limit the team's other programs share.
//!
//! One [`Pace`] per provider per reclaim, shared by its removals and its listings (each
//! listing attempt takes a place in the window like a removal); or, with
//! `Paces::shared` (`options.rs`), one per provider for a whole sweep that reclaims several
//! sessions at once, so that every session's calls wait at the same gate and share the window,
//! the learnt rate and the cap:
//! - **A gate** (`Retry-After`): once the provider asked for a pause, no call goes to it
//!   before the pause is over.
//! - **A window** of calls in flight, AIMD: it starts at `[reclaim] concurrency`, halves on a
//!   throttled answer (a 429, or any answer with a retry hint), and grows by one for every
//!   window's worth of successes. A burst of throttled answers to calls that were all in
//!   flight together halves it once, not once each.
//! - **A pace** between calls, also AIMD: unpaced until the first throttled answer, then 90 %
//!   of what the provider let through in the last second the gate was open (time spent
//!   waiting out a `Retry-After` is not counted: that second says nothing about what the
//!   provider accepts, and counting it made every throttled answer after a pause collapse the
//!   pace to one call a second), growing by about one call a second while nothing is
//!   throttled. A local emulator answers in microseconds, so a window alone would not bound
//!   the rate; the pace does.
//! - **A cap** (`[providers.NAME] rate`, calls a second): never faster, from the first call.
//!
//! Against a token bucket of 20 calls a second, `stop --all` of 600 sandboxes finishes within
//! a few percent of the bucket's capacity with a few percent of its calls throttled
//! (`cargo bench --bench e2b_reclaim`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The pace of one provider.
pub(super) struct Pace {
    state: Mutex<State>,
    freed: Notify,
    cap: Option<f64>,
}

struct State {
    /// Calls allowed in flight (a float, so it can grow by fractions).
    window: f64,
    max_window: f64,
    in_flight: usize,
    /// Calls a second while paced; `None`: unpaced.
    rate: Option<f64>,
    /// The earliest the next call may go out.
    next_slot: Instant,
    /// No call before this (the provider's `Retry-After`).
    gate: Option<Instant>,
    /// Bumped at every decrease: a throttled answer to a call sent before the last decrease
    /// does not decrease again.
    epoch: u64,
    /// When recent successes arrived, for the rate a throttled answer learns from.
    recent: VecDeque<Instant>,
    /// Recent periods the gate was closed (oldest first), which that rate leaves out.
    closed: VecDeque<(Instant, Instant)>,
}

/// How far back a throttled answer looks at what got through, in time the gate was open.
const LOOK_BACK: Duration = Duration::from_secs(1);
/// How long successes and gate periods are kept for that look.
const KEEP: Duration = Duration::from_secs(10);

/// A call's place in the window; released when dropped, reporting how it went.
pub(super) struct Slot<'a> {
    pace: &'a Pace,
    epoch: u64,
}

impl Pace {
    /// A pace allowing `concurrency` calls in flight, never faster than `cap` a second.
    pub(super) fn new(concurrency: usize, cap: Option<f64>) -> Pace {
        let max = concurrency.max(1) as f64;
        Pace {
            state: Mutex::new(State {
                window: max,
                max_window: max,
                in_flight: 0,
                rate: cap,
                next_slot: Instant::now(),
                gate: None,
                epoch: 0,
                recent: VecDeque::new(),
                closed: VecDeque::new(),
            }),
            freed: Notify::new(),
            cap: cap.filter(|c| *c > 0.0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for room in the window, the gate and the pace; the slot is held until dropped.
    pub(super) async fn slot(&self) -> Slot<'_> {
        loop {
            let freed = self.freed.notified();
            let wait = {
                let mut s = self.lock();
                if s.in_flight as f64 >= s.window.floor().max(1.0) {
                    None
                } else {
                    let now = Instant::now();
                    let start = s.next_slot.max(now).max(s.gate.unwrap_or(now));
                    if start <= now {
                        s.in_flight += 1;
                        if let Some(rate) = s.rate {
                            s.next_slot = now + Duration::from_secs_f64(1.0 / rate);
                        }
                        return Slot {
                            pace: self,
                            epoch: s.epoch,
                        };
                    }
                    Some(start)
                }
            };
            match wait {
                Some(until) => tokio::time::sleep_until(until).await,
                None => freed.await,
            }
        }
    }

    /// The provider asked for a pause: no call before it is over.
    pub(super) fn close_for(&self, pause: Duration) {
        let now = Instant::now();
        let until = now + pause;
        let mut s = self.lock();
        match s.closed.back_mut() {
            Some((_, end)) if *end >= now => *end = (*end).max(until),
            _ => s.closed.push_back((now, until)),
        }
        while s
            .closed
            .front()
            .is_some_and(|(_, end)| now.duration_since(*end) > KEEP)
        {
            s.closed.pop_front();
        }
        if s.gate.is_none_or(|g| g < until) {
            s.gate = Some(until);
        }
    }

    /// The successes in the last [`LOOK_BACK`] of time the gate was open.
    fn let_through(s: &State, now: Instant) -> usize {
        let mut start = now.checked_sub(LOOK_BACK).unwrap_or(now);
        for (from, to) in s.closed.iter().rev() {
            let to = (*to).min(now);
            if to <= start {
                break;
            }
            start = start
                .checked_sub(to.duration_since((*from).max(start)))
                .unwrap_or(start);
        }
        s.recent.iter().filter(|t| **t >= start).count()
    }

    fn succeeded(&self) {
        let mut s = self.lock();
        s.window = (s.window + 1.0 / s.window).min(s.max_window);
        if let Some(rate) = s.rate {
            let grown = rate + 1.0 / rate;
            s.rate = Some(self.cap.map_or(grown, |c| grown.min(c)));
        }
        let now = Instant::now();
        s.recent.push_back(now);
        while s
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > KEEP)
        {
            s.recent.pop_front();
        }
    }

    fn throttled(&self, epoch: u64) {
        let mut s = self.lock();
        if epoch != s.epoch {
            return;
        }
        s.epoch += 1;
        s.window = (s.window / 2.0).max(1.0);
        let let_through = Self::let_through(&s, Instant::now()) as f64;
        let learned = (let_through * 0.9).max(1.0);
        let rate = s.rate.map_or(learned, |r| r.min(learned).max(1.0));
        s.rate = Some(self.cap.map_or(rate, |c| rate.min(c)));
        tracing::debug!(
            "throttled: {:.1} calls in flight at most, {rate:.1} a second",
            s.window
        );
    }
}

impl Slot<'_> {
    /// The call succeeded (or its target was gone: the provider answered).
    pub(super) fn succeeded(self) {
        self.pace.succeeded();
    }

    /// The provider throttled the call (a 429, or an answer with a retry hint).
    pub(super) fn throttled(self) {
        self.pace.throttled(self.epoch);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut s = self.pace.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        drop(s);
        self.pace.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_throttled_answer_halves_the_window_once_per_burst_and_paces() {
        let pace = Pace::new(16, None);
        let slots: Vec<Slot> = futures_util::future::join_all((0..16).map(|_| pace.slot())).await;
        let epochs: Vec<u64> = slots.iter().map(|s| s.epoch).collect();
        for s in slots {
            s.throttled();
        }
        assert!(epochs.iter().all(|e| *e == 0));
        let s = pace.lock();
        assert_eq!(s.window, 8.0, "one halving for one burst");
        assert_eq!(
            s.rate,
            Some(1.0),
            "nothing got through in the last second: one a second"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_got_through_is_counted_in_time_the_gate_was_open() {
        let pace = Pace::new(16, None);
        // 20 calls in the half second before the provider asks for a one-second pause.
        for _ in 0..20 {
            pace.slot().await.succeeded();
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        pace.close_for(Duration::from_secs(1));
        let after = pace.slot().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Throttled 100 ms after the gate opened: the last second of open time reaches back
        // over the pause to the 20 calls before it.
        after.throttled();
        let rate = pace.lock().rate.expect("paced");
        assert!((rate - 18.0).abs() < 0.01, "{rate}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cap_spaces_calls_from_the_first() {
        let pace = Pace::new(16, Some(10.0));
        let start = Instant::now();
        for _ in 0..5 {
            pace.slot().await.succeeded();
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(500),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_holds_every_call() {
        let pace = Pace::new(4, None);
        pace.close_for(Duration::from_secs(3));
        let start = Instant::now();
        pace.slot().await.succeeded();
        assert!(start.elapsed() >= Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_asked_for_while_waiting_at_the_gate_is_waited_out_too() {
        let pace = std::sync::Arc::new(Pace::new(4, None));
        pace.close_for(Duration::from_secs(1));
        let start = Instant::now();
        let waiter = tokio::spawn({
            let pace = pace.clone();
            async move { pace.slot().await.succeeded() }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        pace.close_for(Duration::from_secs(2));
        waiter.await.unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(2500),
            "{:?}",
            start.elapsed()
        );
    }
}
