//! What `/proc` says of a running process: resident memory and CPU time, for the chaos
//! tests and the end-to-end benchmarks.

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB; `None` once it is gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// User plus system CPU seconds of the process so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at the state, field 3;
    // utime and stime (fields 14 and 15, in clock ticks of 1/100 s) are 11 and 12 after it.
    let (_, after) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}
