//! The daemon's own limit on open files, raised at start-up: to 65,536 when
//! allowed, as dbus-daemon does, and otherwise at least the soft limit to
//! the hard one. Every connection holds a socket, so the usual soft limit
//! of 1,024 would refuse connections long before the configured connection
//! limits are reached.
//!
//! The services the bus starts get the limit it started with back
//! ([`StartLimit`]), as from dbus-daemon: a program that never asked for
//! 65,536 files should not have them.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// RLIMIT_NOFILE as the daemon found it, before [`raise`]. A restart in
/// place hands it over: the new image inherits the raised limit, which is
/// not what the bus started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartLimit {
    /// None: unlimited.
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

impl StartLimit {
    /// The limit now in force (call it before [`raise`]).
    pub fn now() -> StartLimit {
        let limit = getrlimit(Resource::Nofile);
        StartLimit {
            soft: limit.current,
            hard: limit.maximum,
        }
    }

    pub fn rlimit(self) -> Rlimit {
        Rlimit {
            current: self.soft,
            maximum: self.hard,
        }
    }
}

/// What dbus-daemon raises a privileged bus to.
pub const PRIVILEGED_TARGET: u64 = 65_536;

/// The limit to ask for, given the current one: a privileged process (one
/// allowed to raise its hard limit) gets at least [`PRIVILEGED_TARGET`];
/// anyone may raise the soft limit to the hard one. None: nothing to gain.
pub fn wanted(current: &Rlimit, privileged: bool) -> Option<Rlimit> {
    // None stands for RLIM_INFINITY.
    let hard = current.maximum;
    let soft = current.current;
    let target = match hard {
        None => None,
        Some(hard) if privileged => Some(hard.max(PRIVILEGED_TARGET)),
        Some(hard) => Some(hard),
    };
    let already = match (soft, target) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(soft), Some(target)) => soft >= target,
    };
    if already {
        return None;
    }
    Some(Rlimit {
        current: target,
        maximum: match (hard, target) {
            (Some(hard), Some(target)) => Some(hard.max(target)),
            _ => None,
        },
    })
}

/// Raises RLIMIT_NOFILE as far as allowed; returns the soft limit now in
/// force (None: unlimited). Failing to raise is not an error: the daemon
/// runs with what it has, and says so.
pub fn raise() -> Option<u64> {
    let current = getrlimit(Resource::Nofile);
    // Try as privileged first (root, or CAP_SYS_RESOURCE); the kernel
    // refuses a higher hard limit to others, then raise soft to hard.
    for privileged in [true, false] {
        if let Some(new) = wanted(&current, privileged) {
            match setrlimit(Resource::Nofile, new) {
                Ok(()) => return getrlimit(Resource::Nofile).current,
                Err(e) if privileged => {
                    tracing::debug!("cannot raise the hard fd limit: {e}");
                }
                Err(e) => tracing::warn!("cannot raise the fd limit: {e}"),
            }
        }
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(soft: u64, hard: u64) -> Rlimit {
        Rlimit {
            current: Some(soft),
            maximum: Some(hard),
        }
    }

    #[test]
    fn anyone_raises_soft_to_hard() {
        assert_eq!(wanted(&limit(1024, 4096), false), Some(limit(4096, 4096)));
        assert_eq!(wanted(&limit(4096, 4096), false), None);
    }

    #[test]
    fn privileged_buses_get_at_least_65536() {
        assert_eq!(
            wanted(&limit(1024, 20_000), true),
            Some(limit(65_536, 65_536))
        );
        assert_eq!(
            wanted(&limit(1024, 1_048_576), true),
            Some(limit(1_048_576, 1_048_576))
        );
        assert_eq!(wanted(&limit(65_536, 65_536), true), None);
    }

    #[test]
    fn unlimited_stays_unlimited() {
        let unlimited = Rlimit {
            current: None,
            maximum: None,
        };
        assert_eq!(wanted(&unlimited, true), None);
        let soft_only = Rlimit {
            current: Some(1024),
            maximum: None,
        };
        assert_eq!(
            wanted(&soft_only, false),
            Some(Rlimit {
                current: None,
                maximum: None
            })
        );
    }

    #[test]
    fn raising_leaves_at_least_the_hard_limit_in_force() {
        let before = getrlimit(Resource::Nofile);
        let now = raise();
        match (before.maximum, now) {
            (Some(hard), Some(soft)) => assert!(soft >= hard, "soft {soft} < hard {hard}"),
            (_, None) => {}
            (None, Some(soft)) => panic!("unlimited hard limit, yet soft {soft}"),
        }
    }
}
