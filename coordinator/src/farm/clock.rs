//! The farm's clock for leases: time the coordinator was running, not wall time.
//!
//! Leases expire when a worker was silent for [`super::core::LEASE_TTL`]; but a coordinator
//! that was itself stalled (SIGSTOP, a swap storm, a slow disk under the process, a VM
//! paused) heard nobody meanwhile, and on waking its first tick would find every lease
//! "silent" for the length of the stall and requeue every running task, although each
//! worker's heartbeats sit unread in the socket. So the farm actor reads its time through a
//! [`RunningClock`]: the farm actor ticks every second, and a gap between two of its events
//! longer than [`STALL_GAP`] counts as only [`STALL_GAP`] of running time. A worker that really
//! died during the stall is still found out — [`super::core::LEASE_TTL`] of running time
//! after its last heartbeat.
//!
//! Sans-IO: the caller passes its monotonic time in, and gets the running time back.

use std::time::Duration;

/// A gap between two events of the farm actor (which ticks every second) longer than this is
/// the coordinator's own stall: beyond it, time does not count against leases.
pub const STALL_GAP: Duration = Duration::from_secs(3);

/// Running time: the caller's clock minus what every stall beyond [`STALL_GAP`] took.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunningClock {
    last: Option<Duration>,
    stalled: Duration,
}

impl RunningClock {
    /// The running time at monotonic time `now` (non-decreasing in `now`; a `now` earlier
    /// than the last one seen is taken as the last one).
    pub fn running(&mut self, now: Duration) -> Duration {
        let now = self.last.map_or(now, |last| now.max(last));
        if let Some(last) = self.last {
            let gap = now - last;
            if gap > STALL_GAP {
                self.stalled += gap - STALL_GAP;
            }
        }
        self.last = Some(now);
        now - self.stalled
    }

    /// How much time stalls took so far.
    pub fn stalled(&self) -> Duration {
        self.stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn steady_ticks_are_wall_time() {
        let mut c = RunningClock::default();
        for t in 0..100 {
            assert_eq!(c.running(s(t)), s(t));
        }
        assert_eq!(c.stalled(), Duration::ZERO);
        // Gaps up to the bound count in full.
        assert_eq!(c.running(s(99) + STALL_GAP), s(99) + STALL_GAP);
    }

    #[test]
    fn a_stall_counts_as_the_bound_and_time_runs_on_after_it() {
        let mut c = RunningClock::default();
        assert_eq!(c.running(s(10)), s(10));
        // Twenty seconds without a single event: the process was stopped.
        assert_eq!(c.running(s(30)), s(10) + STALL_GAP);
        assert_eq!(c.stalled(), s(20) - STALL_GAP);
        assert_eq!(c.running(s(31)), s(11) + STALL_GAP);
        // A second stall adds up.
        assert_eq!(c.running(s(61)), s(11) + STALL_GAP * 2);
    }

    #[test]
    fn running_time_never_goes_back() {
        let mut c = RunningClock::default();
        assert_eq!(c.running(s(5)), s(5));
        assert_eq!(c.running(s(4)), s(5));
        assert_eq!(c.running(s(6)), s(6));
    }
}
