//! The scheduler's peak RSS and CPU time, read from `/proc/<pid>` (Linux).

/// USER_HZ: the unit of the CPU times in `/proc/<pid>/stat`, fixed at 100 by the kernel's
/// ABI on every architecture Linux runs Kubernetes on.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStats {
    pub peak_rss_bytes: u64,
    pub cpu_seconds: f64,
}

/// `VmHWM` of a `/proc/<pid>/status`, in bytes.
fn peak_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// User plus system time of a `/proc/<pid>/stat` (every thread), in seconds. The command
/// name may hold spaces and parentheses: fields are counted after its last `)`.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3 of the whole line, utime 14 and stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// `None` when the process is gone or `/proc` cannot be read.
pub fn read(pid: u32) -> Option<ProcessStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(ProcessStats {
        peak_rss_bytes: peak_rss(&status)?,
        cpu_seconds: cpu_seconds(&stat)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read() {
        assert_eq!(
            peak_rss("Name:\tx\nVmPeak:\t 9 kB\nVmHWM:\t   2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        let stat = "4242 (multi (arch) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000 200";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        let own = read(std::process::id()).unwrap();
        assert!(own.peak_rss_bytes > 0);
    }
}
