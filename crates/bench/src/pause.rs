//! Keeping one lane's processes off the CPUs while the other lane measures.
//!
//! The benches that compare viastack with a peer system (`bench group`, `bench multicast`'s
//! peer lane) keep both lanes' processes alive for the whole run and alternate rounds between
//! them, so that the JVMs stay warm. On a two-core machine the idle lane is not idle: JGroups'
//! JIT and GC threads, its timers and its retransmission and stability tasks take CPU from the
//! round being measured (design guide §7's figures are per-lane rates). A [`Paused`] stops the
//! idle lane's processes with `SIGSTOP` for the length of the other lane's round and resumes
//! them with `SIGCONT` when dropped, and [`LaneCpu`] measures how much CPU a lane used while it
//! was supposed to be idle, so the report can show the effect.
//!
//! A stopped process sends no heartbeats. Both lanes' failure detectors suspect only after
//! 500 ms of silence and confirm a suspicion only if the silence lasts 200 ms more; a lane
//! resumed after a long round may therefore see suspicions that heartbeats clear at once. The
//! benches count views installed outside a crash so that a disturbance is visible in the report.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::cpu::process_cpu;

/// Processes stopped with `SIGSTOP` until this value is dropped.
pub struct Paused {
    pids: Vec<Pid>,
}

impl Paused {
    /// Stops every process in `pids` (those that are gone already are skipped).
    pub fn stop(pids: impl IntoIterator<Item = u32>) -> Paused {
        let pids = pids
            .into_iter()
            .filter_map(|p| i32::try_from(p).ok())
            .map(Pid::from_raw)
            .filter(|&p| kill(p, Signal::SIGSTOP).is_ok())
            .collect();
        Paused { pids }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        for &p in &self.pids {
            let _ = kill(p, Signal::SIGCONT);
        }
    }
}

/// The CPU time a set of processes used between [`LaneCpu::start`] and [`LaneCpu::used`].
pub struct LaneCpu {
    pids: Vec<u32>,
    at_start: Duration,
}

impl LaneCpu {
    /// Starts counting for `pids`.
    pub fn start(pids: Vec<u32>) -> LaneCpu {
        let at_start = Self::total(&pids);
        LaneCpu { pids, at_start }
    }

    fn total(pids: &[u32]) -> Duration {
        pids.iter().filter_map(|&p| process_cpu(Some(p))).sum()
    }

    /// CPU seconds used since the start (0 if a process went away meanwhile).
    pub fn used(&self) -> f64 {
        Self::total(&self.pids)
            .saturating_sub(self.at_start)
            .as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// `waitpid` with `WUNTRACED`/`WCONTINUED` reports the child's stop and its resumption: the
    /// signals are delivered asynchronously, so the test waits for the kernel to report each.
    #[test]
    fn a_paused_process_is_stopped_and_resumed() {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let mut child = Command::new("sleep")
            .arg("30")
            .stdout(Stdio::null())
            .spawn()
            .expect("sleep");
        let pid = child.id();
        let nix_pid = Pid::from_raw(i32::try_from(pid).expect("pid"));
        {
            let _paused = Paused::stop([pid]);
            let status = waitpid(nix_pid, Some(WaitPidFlag::WUNTRACED)).expect("waitpid");
            assert_eq!(
                status,
                WaitStatus::Stopped(nix_pid, Signal::SIGSTOP),
                "SIGSTOP took effect"
            );
        }
        let status = waitpid(nix_pid, Some(WaitPidFlag::WCONTINUED)).expect("waitpid");
        assert_eq!(
            status,
            WaitStatus::Continued(nix_pid),
            "SIGCONT resumed the process"
        );
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
}
