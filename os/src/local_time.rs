//! The local wall-clock time of day, for operator views that say when something happened
//! (`strata-ctl top`'s "router unreachable since HH:MM:SS").
//!
//! The `time` crate's local offset refuses to work once a process has a second thread, so
//! the C library's `localtime_r` is asked instead (it reads `TZ` and /etc/localtime itself).

use std::time::{SystemTime, UNIX_EPOCH};

/// A time of day on the local clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockTime {
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
}

impl std::fmt::Display for ClockTime {
    /// `HH:MM:SS`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:{:02}:{:02}", self.hour, self.minute, self.second)
    }
}

/// The local time of day at `at`; UTC when the C library cannot convert it.
pub fn local_clock_time(at: SystemTime) -> ClockTime {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let utc = || ClockTime {
        hour: ((secs / 3600) % 24) as u8,
        minute: ((secs / 60) % 60) as u8,
        second: (secs % 60) as u8,
    };
    let Ok(time) = nix::libc::time_t::try_from(secs) else {
        return utc();
    };
    // SAFETY: `tm` is plain data, for which all-zero bytes are a valid value.
    let mut tm: nix::libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live, properly aligned locals for the whole call;
    // `localtime_r` (unlike `localtime`) writes only into the `tm` it is given and keeps no
    // pointer to either argument.
    let converted = unsafe { nix::libc::localtime_r(&time, &mut tm) };
    if converted.is_null() {
        return utc();
    }
    ClockTime {
        hour: tm.tm_hour.clamp(0, 23) as u8,
        minute: tm.tm_min.clamp(0, 59) as u8,
        // 60 is a leap second.
        second: tm.tm_sec.clamp(0, 60) as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_time_is_two_digits_each_and_moves_with_the_clock() {
        let now = SystemTime::now();
        let text = local_clock_time(now).to_string();
        assert_eq!(text.len(), 8, "{text}");
        assert_eq!(text.as_bytes()[2], b':');
        assert_eq!(text.as_bytes()[5], b':');
        // One second later is one second later on the clock (modulo the minute).
        let a = local_clock_time(UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000));
        let b = local_clock_time(UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_001));
        assert_eq!((a.second + 1) % 60, b.second % 60);
        assert_eq!(
            ClockTime {
                hour: 9,
                minute: 5,
                second: 7
            }
            .to_string(),
            "09:05:07"
        );
    }
}
