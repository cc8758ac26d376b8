//! CPU time of a process, read the same way for every lane (issue 13 §5): `utime + stime` of
//! `/proc/PID/stat`, all of the process's threads, user and kernel. viastack's lanes and the
//! kernel references run in this process (read as `self`); the JGroups peers are two JVMs,
//! read by their pids and summed. The kernel counts in clock ticks (10 ms at the usual 100 Hz),
//! so rounds are sized to last hundreds of milliseconds.

use std::time::Duration;

/// CPU time used so far by process `pid` (`None`: this process); `None` where `/proc` cannot
/// tell (not Linux, the process is gone).
pub fn process_cpu(pid: Option<u32>) -> Option<Duration> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    ticks_to_duration(parse_stat(&stat)?)
}

/// `utime + stime` in clock ticks from the text of `/proc/PID/stat` (fields 14 and 15; the
/// command name in field 2 may hold spaces and parentheses, so fields count from its last `)`).
fn parse_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_to_duration(ticks: u64) -> Option<Duration> {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&hz| hz > 0)?;
    let hz = u64::try_from(hz).ok()?;
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / hz,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_count_from_the_last_parenthesis() {
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(parse_stat(stat), Some(325));
        assert_eq!(parse_stat("1234 (x) S 1"), None);
    }

    #[test]
    fn this_process_accumulates_cpu_time() {
        let before = process_cpu(None).expect("/proc/self/stat");
        // Work until the clock ticks past `before` (a tick is 10 ms at 100 Hz); a reader
        // that never moved would spin to the bound and fail.
        let mut x = 0u64;
        let mut after = before;
        for _ in 0..2_000 {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = process_cpu(None).expect("/proc/self/stat");
            if after > before {
                break;
            }
        }
        assert!(after > before, "{before:?} -> {after:?}");
    }
}
