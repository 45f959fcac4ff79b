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

/// The process's threads now (`Threads` of `/proc/PID/status`).
pub fn threads(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

/// Each live thread of the process: its name, its context switches (voluntary plus
/// involuntary) and its CPU nanoseconds so far (`/proc/PID/task/TID/{status,schedstat}`).
/// A thread that has ended is no longer counted.
pub fn thread_counts(pid: u32) -> Vec<(String, u64, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let field = |name: &str| -> Option<&str> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        };
        let number =
            |name: &str| -> u64 { field(name).and_then(|v| v.trim().parse().ok()).unwrap_or(0) };
        let switches = number("voluntary_ctxt_switches") + number("nonvoluntary_ctxt_switches");
        let name = field("Name").unwrap_or("").trim().to_string();
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        out.push((name, switches, ns));
    }
    out
}

/// The context switches (voluntary plus involuntary) of the process's live threads so far.
pub fn context_switches(pid: u32) -> u64 {
    thread_counts(pid).iter().map(|(_, s, _)| s).sum()
}

/// The CPU seconds of the process's live threads so far, to the nanosecond (for idle figures
/// too small for [`cpu_seconds`]' 10 ms ticks).
pub fn cpu_seconds_fine(pid: u32) -> f64 {
    thread_counts(pid)
        .iter()
        .map(|(_, _, ns)| *ns as f64)
        .sum::<f64>()
        / 1e9
}
