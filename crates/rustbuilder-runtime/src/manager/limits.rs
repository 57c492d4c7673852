//! The process's limits, raised where an operator needs more than a shell's defaults.

use tracing::{debug, warn};

/// Raises the soft limit of open files to the hard limit, as Go's runtime does at start since 1.19:
/// a shell's default soft limit (1,024) is a few hundred clusters of a fleet, each holding
/// connections and watches, while the hard limit is usually far higher.
pub(crate) fn raise_open_files() {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes the limit into `limit`, which lives for the call.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        if limit.rlim_cur < limit.rlim_max {
            let before = limit.rlim_cur;
            limit.rlim_cur = limit.rlim_max;
            // SAFETY: `setrlimit` reads `limit`; raising the soft limit up to the hard one is allowed
            // to every process.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
                warn!(
                    soft = before,
                    hard = limit.rlim_max,
                    error = %std::io::Error::last_os_error(),
                    "cannot raise the limit of open files"
                );
                return;
            }
            debug!(
                from = before,
                to = limit.rlim_cur,
                "raised the limit of open files"
            );
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_of_open_files_is_raised_to_the_hard_one() {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise_open_files`.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        let hard = limit.rlim_max;
        // A shell's default, below the hard limit (the other tests of this process keep working
        // with 1,024 files).
        limit.rlim_cur = hard.min(1024);
        // SAFETY: lowering the soft limit is allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
        raise_open_files();
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, hard);
    }
}
