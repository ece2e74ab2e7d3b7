//! Running part of a test as another user without a child process: Linux
//! keeps credentials per thread, so a thread of its own may change its uid
//! while the rest of the test stays root. Sockets it connects carry its
//! credentials (the kernel records SO_PEERCRED at connect), and the SASL
//! EXTERNAL identity quickbus-client sends is its uid too.

use std::thread;

use rustix1::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
use rustix1::thread::{Gid, Uid};

/// uid and gid of `nobody` and `nogroup` on Debian.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// Whether this test process may change users (it must be root).
pub fn can_change_user() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs `f` on a new thread whose real, effective and saved ids are
/// `uid`:`gid`, with no supplementary groups, and returns what it returns.
/// Panics if the process is not root (check [`can_change_user`] first).
pub fn as_user<T: Send + 'static>(
    (uid, gid): (u32, u32),
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let worker = thread::spawn(move || {
        // Groups and gid first: without root they could not change.
        set_thread_groups(&[]).expect("drop supplementary groups (root needed)");
        let gid = Gid::from_raw(gid);
        set_thread_res_gid(gid, gid, gid).expect("set the thread's gid (root needed)");
        let uid = Uid::from_raw(uid);
        set_thread_res_uid(uid, uid, uid).expect("set the thread's uid (root needed)");
        f()
    });
    match worker.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
