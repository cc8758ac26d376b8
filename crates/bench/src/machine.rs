//! Where a benchmark ran (issue 13 §6): CPU model, cores, kernel, host, the viastack commit and
//! the date, recorded in `bench all`'s results file and printed under every chart, so figures
//! from different machines and commits are never compared unknowingly.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock (here: the date of a run)

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// The machine and the code a run measured.
#[derive(Debug, Clone)]
pub struct Machine {
    /// `model name` of /proc/cpuinfo.
    pub cpu: String,
    /// Online processors.
    pub cores: usize,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The host name.
    pub host: String,
    /// `git rev-parse --short HEAD` of the source tree, `-dirty` when it has changes.
    pub commit: String,
    /// The UTC date, `YYYY-MM-DD`.
    pub date: String,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Machine {
    /// Reads this machine and the source tree the binary was built from.
    pub fn current() -> Machine {
        let cpu = read_trimmed("/proc/cpuinfo")
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let src = Path::new(env!("CARGO_MANIFEST_DIR"));
        let commit = match git(src, &["rev-parse", "--short", "HEAD"]) {
            Some(c) => {
                let dirty = git(src, &["status", "--porcelain", "--untracked-files=no"])
                    .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{c}-dirty")
                } else {
                    c
                }
            }
            None => "unknown".into(),
        };
        let days = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 86_400);
        Machine {
            cpu,
            // Online processors, not this thread's affinity (benchmarks pin threads).
            cores: nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
                .ok()
                .flatten()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(1),
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            host: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            commit,
            date: civil_date(days as i64),
        }
    }

    /// The chart footnote: one line.
    pub fn footnote(&self) -> String {
        format!(
            "{} · {} cores · Linux {} · host {} · viastack {} · {}",
            self.cpu, self.cores, self.kernel, self.host, self.commit, self.date
        )
    }

    /// The machine a results document records (what [`Machine::json`] wrote); fields it
    /// lacks read `?`.
    pub fn from_json(v: &Value) -> Machine {
        let text = |k: &str| v[k].as_str().unwrap_or("?").to_string();
        Machine {
            cpu: text("cpu"),
            cores: v["cores"].as_u64().map_or(0, |n| n as usize),
            kernel: text("kernel"),
            host: text("host"),
            commit: text("commit"),
            date: text("date"),
        }
    }

    /// As JSON, for results files.
    pub fn json(&self) -> Value {
        json!({
            "cpu": self.cpu,
            "cores": self.cores,
            "kernel": self.kernel,
            "host": self.host,
            "commit": self.commit,
            "date": self.date,
        })
    }
}

/// `YYYY-MM-DD` of the day `days` after 1970-01-01 (proleptic Gregorian; H. Hinnant's
/// days-to-civil algorithm).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_417), "2025-11-25");
        assert_eq!(civil_date(-1), "1969-12-31");
    }

    #[test]
    fn this_machine_is_described() {
        let m = Machine::current();
        assert!(m.cores >= 1);
        assert_eq!(m.date.len(), 10);
        assert!(m.footnote().contains(&m.kernel));
        assert_eq!(Machine::from_json(&m.json()).footnote(), m.footnote());
    }
}
