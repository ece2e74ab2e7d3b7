//! The few operating-system calls that safe wrappers don't cover: adopting
//! an inherited fd by number, marking every fd close-on-exec, forking into
//! the background, reading kernel-provided peer credentials, starting a
//! service clean and as its user, receiving into a buffer's uninitialised
//! spare capacity, and mapping a restart's memfd. Every `unsafe` block of
//! the daemon is here, each with the argument for its soundness, except
//! libselinux's FFI (`mac::libselinux`): the workspace denies
//! `unsafe_code` everywhere else.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use quickbus_bus::fds::PassedFd;
use quickbus_bus::Credentials;

/// Take ownership of an fd number our parent handed us (`--print-address=FD`).
///
/// Must be called at start-up, before the daemon opens any file or socket
/// of its own: then nothing else in this process owns `fd`, which is what
/// `OwnedFd::from_raw_fd` requires. We first check with `fcntl(F_GETFD)`
/// that the number is open, so a wrong number is a clear error rather than
/// an fd we would later close under someone's feet.
pub fn adopt_inherited_fd(fd: RawFd) -> io::Result<File> {
    if fd < 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "negative fd"));
    }
    // SAFETY: borrow_raw only needs `fd` to stay open for the borrow; fcntl on
    // a closed number simply fails with EBADF, which we report.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(borrowed).map_err(io::Error::from)?;
    // SAFETY: `fd` is open (checked above) and, per this function's contract,
    // nothing else in the process owns it; we become its only owner.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Set or clear close-on-exec on descriptor `fd` (a restart in place
/// clears it on every descriptor its state names, and sets it again if
/// the exec fails).
///
/// `fd` must be a descriptor this process holds open for the duration
/// of the call (the caller owns the state that names it).
pub fn set_close_on_exec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: borrow_raw needs `fd` open for the borrow, which is this
    // function's contract; fcntl on it changes only its flags.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut flags = rustix::io::fcntl_getfd(borrowed)?;
    flags.set(rustix::io::FdFlags::CLOEXEC, on);
    rustix::io::fcntl_setfd(borrowed, flags)?;
    Ok(())
}

/// A new descriptor (close-on-exec) for the same open file as `fd`, a
/// number the previous image of this process handed over.
///
/// The number is checked to be open first (EBADF is reported); it is only
/// borrowed, so the caller stays free to adopt or close it afterwards.
pub fn duplicate_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "negative fd"));
    }
    // SAFETY: borrow_raw needs `fd` open for the borrow: fcntl(F_GETFD)
    // fails with EBADF on a closed number, and nothing in this process
    // closes it meanwhile (the handover's numbers are owned by nobody
    // until they are adopted, after the state was restored).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(borrowed)?;
    Ok(rustix::io::fcntl_dupfd_cloexec(borrowed, 0)?)
}

/// The listening sockets systemd passed us (`LISTEN_PID`, `LISTEN_FDS`:
/// fds 3, 4, ... for this pid), or None when none were passed. The
/// variables are removed so children we start don't see them.
///
/// Same contract as [`adopt_inherited_fd`]: call at start-up, before the
/// daemon opens files of its own.
pub fn take_systemd_listen_fds() -> io::Result<Option<Vec<OwnedFd>>> {
    const SD_LISTEN_FDS_START: RawFd = 3;
    let pid = std::env::var("LISTEN_PID").ok();
    let count = std::env::var("LISTEN_FDS").ok();
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (Some(pid), Some(count)) = (pid, count) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    let count: RawFd = count.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad LISTEN_FDS={count}"),
        )
    })?;
    let mut fds = Vec::new();
    for fd in SD_LISTEN_FDS_START..SD_LISTEN_FDS_START + count {
        let file = adopt_inherited_fd(fd)?;
        let fd = OwnedFd::from(file);
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        fds.push(fd);
    }
    Ok(Some(fds))
}

/// Fork into the background: [`fork_single_threaded`], the child then
/// calling `setsid`. Called at start-up, before the event loop, while the
/// daemon has one thread (its only own one then, the log's, is ended by
/// [`fork_single_threaded`]).
pub fn fork_daemon() -> io::Result<Option<u32>> {
    let forked = fork_single_threaded()?;
    if forked.is_none() {
        let _ = rustix::process::setsid();
    }
    Ok(forked)
}

/// End the daemon's own threads: the spawner's (the programs waiting to
/// be started are started first; `spawner`), the fd closer's (every fd a
/// client passed that waits is closed first; `fd_closer`) and the log's
/// (its lines written once, by this process); the next program, fd or
/// line starts another. Then wait until the process is that one thread
/// ([`wait_for_one_thread`]).
fn become_single_threaded() -> io::Result<()> {
    crate::spawner::end(crate::spawner::END_WAIT)
        .map_err(|still| io::Error::other(still.to_string()))?;
    crate::fd_closer::end(crate::fd_closer::END_WAIT)
        .map_err(|still| io::Error::other(still.to_string()))?;
    if !crate::logging::drain() {
        return Err(io::Error::other(
            "the log's thread is still writing (its sink takes nothing)",
        ));
    }
    wait_for_one_thread()
}

/// Fork a single-threaded process (the daemon going into the background,
/// or the new image of a restart in place checking its handover in a
/// child: `restart::resume`): Some(child pid) in the parent, None in the
/// child. Refused when the process has more than one thread, where the
/// child could inherit a lock held by a thread it does not have.
pub fn fork_single_threaded() -> io::Result<Option<u32>> {
    become_single_threaded().map_err(|e| io::Error::new(e.kind(), format!("{e}: no fork")))?;
    // SAFETY: fork() is sound in a single-threaded process, checked just
    // above (nothing in this process starts a thread meanwhile).
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        child => Ok(Some(child as u32)),
    }
}

/// Wait until this process is one thread; an error naming how many it
/// has if it still has more after a second. A thread just joined is
/// counted until the kernel has reaped it: such threads get a moment to
/// go.
fn wait_for_one_thread() -> io::Result<()> {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let threads = thread_count()?;
        if threads == Some(1) {
            return Ok(());
        }
        if std::time::Instant::now() >= give_up {
            let threads = threads.map_or("?".to_owned(), |n| n.to_string());
            return Err(io::Error::other(format!("{threads} threads")));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// This process's threads, as the kernel counts them (`Threads:` in
/// /proc/self/status).
fn thread_count() -> io::Result<Option<usize>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok()))
}

/// End this process at once with `code`: no destructors, no atexit
/// handlers, no flushing of buffers a forked child shares with its parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions; it never returns.
    unsafe { libc::_exit(code) }
}

/// Point stdin, stdout and stderr of a forked daemon at /dev/null, as
/// dbus-daemon does (unless the user asked to keep its output).
pub fn detach_stdio() -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for target in 0..3 {
        // SAFETY: 0, 1 and 2 are the standard streams, always reserved for
        // them in this process; dup2 over them closes whatever they were
        // and never touches an fd another owner holds.
        let mut std_fd = unsafe { OwnedFd::from_raw_fd(target) };
        rustix::io::dup2(null.as_fd(), &mut std_fd)?;
        std::mem::forget(std_fd); // stays open as the standard stream
    }
    Ok(())
}

/// Room for the control message of one `recvmsg`: a `cmsghdr` and up to
/// 253 fds (the kernel's SCM_MAX_FD) need 1,032 bytes on 64-bit Linux;
/// `u64` elements give the alignment `cmsghdr` needs.
type ControlSpace = [u64; 160];

/// One `recvmsg(MSG_DONTWAIT | MSG_CMSG_CLOEXEC)` of at most `want` bytes,
/// appended to `buf` without zero-filling its spare capacity first (safe
/// Rust's `recvmsg` wants initialised memory, and zeroing the read window
/// cost more than the rest of routing a small message; see
/// docs/performance.md). Fds that arrive with SCM_RIGHTS are appended to
/// `fds`. Returns the byte count (0 at end of stream) and whether fds came;
/// EMFILE when fds that came could not all be taken in (MSG_CTRUNC).
pub fn recv_appending(
    socket: impl AsFd,
    buf: &mut bytes::BytesMut,
    want: usize,
    fds: &mut std::collections::VecDeque<PassedFd>,
) -> Result<(usize, bool), rustix::io::Errno> {
    buf.reserve(want);
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: want.min(spare.len()),
    };
    // Not zeroed (1,280 bytes per read): the kernel writes the control
    // messages and sets `msg_controllen` to their length, and only those
    // bytes are read below.
    let mut control = std::mem::MaybeUninit::<ControlSpace>::uninit();
    // SAFETY: an all-zero msghdr is valid (null name, no iovecs).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of::<ControlSpace>();
    // SAFETY: the iovec covers `iov_len` bytes of `buf`'s spare capacity,
    // which `buf` owns and we borrow exclusively; the kernel only writes
    // there (uninitialised memory is fine to write to through a raw
    // pointer). The control buffer is a live, aligned local of the
    // declared length. `msg` outlives the call.
    let got = unsafe {
        libc::recvmsg(
            socket.as_fd().as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if got < 0 {
        return Err(
            rustix::io::Errno::from_io_error(&io::Error::last_os_error())
                .unwrap_or(rustix::io::Errno::IO),
        );
    }
    let got = got as usize;
    // SAFETY: recvmsg returned `got` <= iov_len: the kernel initialised
    // that many bytes right after the current length, within capacity.
    unsafe { buf.set_len(buf.len() + got) };
    let mut got_fds = false;
    // SAFETY: the kernel filled (and so initialised) `msg_controllen`
    // bytes of the control buffer with well-formed cmsghdrs and set
    // `msg_controllen` to that length; CMSG_FIRSTHDR/CMSG_NXTHDR walk them
    // within it (CMSG_NXTHDR reads a next header only once it lies wholly
    // inside) and return null at the end, so the uninitialised rest of
    // the buffer is never read.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: non-null cmsg points at a header inside `control`.
        let header = unsafe { &*cmsg };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) is arithmetic on a constant.
            let data_len = header.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: the data of an SCM_RIGHTS message is `data_len`
            // bytes of ints inside `control`; read_unaligned copes with
            // any alignment.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
            for i in 0..data_len / std::mem::size_of::<RawFd>() {
                // SAFETY: i is within the message's data (see above).
                let fd = unsafe { data.add(i).read_unaligned() };
                // SAFETY: the kernel just installed this fd in our table
                // for us (SCM_RIGHTS); nothing else knows or owns it.
                fds.push_back(PassedFd::from(unsafe { OwnedFd::from_raw_fd(fd) }));
                got_fds = true;
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        // Some of the fds that came with these bytes are gone: the kernel
        // could not install them (the process is at its fd limit: the
        // control buffer has room for all that one sendmsg can carry),
        // and closed them. What arrived can no longer be matched with its
        // fds, so the connection is given up, as dbus-daemon gives it up.
        // These bytes are taken back out of the input (and their fds
        // dropped with the connection): a message they complete must not
        // be routed before the error is seen (a read a worker made ahead
        // is looked at only once the input lacks a whole message).
        buf.truncate(buf.len() - got);
        return Err(rustix::io::Errno::MFILE);
    }
    Ok((got, got_fds))
}

/// rustix's ids for a user, its primary group and its supplementary
/// groups. (uid_t) -1 and (gid_t) -1 mean "leave unchanged" to the kernel,
/// so rustix's constructors are unsafe: they are refused here first.
fn user_ids(
    uid: u32,
    gid: u32,
    groups: &[u32],
) -> io::Result<(
    rustix::process::Uid,
    rustix::process::Gid,
    Vec<rustix::process::Gid>,
)> {
    use rustix::process::{Gid, Uid};
    if uid == u32::MAX || gid == u32::MAX || groups.contains(&u32::MAX) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "uid or gid -1 names no user or group",
        ));
    }
    // SAFETY: none of the values is -1 (checked above), the only value
    // `Gid::from_raw` and `Uid::from_raw` must not be given.
    let (uid, gid, groups) = unsafe {
        (
            Uid::from_raw(uid),
            Gid::from_raw(gid),
            groups.iter().map(|&g| Gid::from_raw(g)).collect::<Vec<_>>(),
        )
    };
    Ok((uid, gid, groups))
}

/// Become `uid`:`gid` with the supplementary `groups`, for good (real,
/// effective and saved ids), as dbus-daemon does for `<user>` once its
/// sockets and pid file exist.
///
/// rustix's calls change the calling thread's ids only (raw syscalls, not
/// libc's process-wide broadcast), so the process must be that one
/// thread: the daemon's own threads (`become_single_threaded`: the log's,
/// which a line logged before the change started as root, and the
/// spawner's and fd closer's, were there any) are ended first (the next
/// line, program or fd starts one as the user), and the change is refused
/// while any other thread runs, which
/// would keep root's ids and capabilities for the bus's life. Groups
/// first, then the gid, then the uid: after the uid change nothing else
/// may be changed.
pub fn become_user(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let (uid, gid, groups) = user_ids(uid, gid, groups)?;
    become_single_threaded()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot change user: {e}")))?;
    let failed =
        |what: String| move |e: rustix::io::Errno| io::Error::new(e.kind(), format!("{what}: {e}"));
    rustix::thread::set_thread_groups(&groups).map_err(failed("Failed to set groups".into()))?;
    rustix::thread::set_thread_res_gid(gid, gid, gid)
        .map_err(failed(format!("Failed to set GID to {}", gid.as_raw())))?;
    rustix::thread::set_thread_res_uid(uid, uid, uid)
        .map_err(failed(format!("Failed to set UID to {}", uid.as_raw())))?;
    Ok(())
}

/// Make `command`'s child run as `uid`:`gid` with the supplementary
/// `groups` (the service's `User=`, its groups as `initgroups` would set
/// them, looked up beforehand by the caller: NSS is no place for a forked
/// child).
///
/// std's `uid`/`gid` cannot set supplementary groups (it only clears
/// them), and its `pre_exec` hooks run after its own id changes, so the
/// hook does all three itself, in the order that works: groups, gid, uid.
pub fn run_as_user(command: &mut Command, uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let (uid, gid, groups) = user_ids(uid, gid, groups)?;
    let switch = move || -> io::Result<()> {
        rustix::thread::set_thread_groups(&groups)?;
        rustix::thread::set_thread_res_gid(gid, gid, gid)?;
        rustix::thread::set_thread_res_uid(uid, uid, uid)?;
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It only makes
    // three raw system calls (setgroups, setresgid, setresuid: rustix's
    // thread variants, which neither lock nor allocate; the child has one
    // thread, so they change the whole process) on values prepared in the
    // parent, and turns an errno into an io::Error without allocating.
    // Nothing it touches can be left inconsistent by the fork.
    unsafe {
        command.pre_exec(switch);
    }
    Ok(())
}

/// Mark every descriptor from 3 up close-on-exec, in this process: what
/// the daemon inherited and does not use, and what a restart in place
/// handed over (docs/restart.md). Nothing is closed, so no owner is
/// harmed; an exec (a restart, a started service) passes on none of them
/// but those explicitly made inheritable again.
pub fn close_on_exec_above_stdio() -> io::Result<()> {
    if close_range_cloexec().is_err() {
        mark_close_on_exec_up_to(highest_open_fd()?);
    }
    Ok(())
}

/// Whether the kernel has `close_range` with `CLOSE_RANGE_CLOEXEC` (Linux
/// 5.11), asked once with a range that holds no descriptor.
fn close_range_cloexec_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        // SAFETY: as in `close_range_cloexec`; the range [MAX, MAX] holds
        // no descriptor, so nothing changes whatever the answer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                libc::c_uint::MAX,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        rc == 0
    })
}

/// The highest descriptor number this process has open (2 if none is
/// above stderr), from /proc/self/fd.
fn highest_open_fd() -> io::Result<RawFd> {
    Ok(std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .fold(2, RawFd::max))
}

/// Before Linux 5.11, what `close_range_cloexec` does: every number from
/// 3 to `highest`, one `fcntl` each. Async-signal-safe (no allocation, no
/// lock), for a forked child too.
fn mark_close_on_exec_up_to(highest: RawFd) {
    for fd in 3..=highest {
        // SAFETY: fcntl(F_SETFD) on a number changes at most that
        // descriptor's flags; on a closed number it fails with EBADF,
        // which is ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)` (Linux 5.11): flags only, a
/// single system call, async-signal-safe (no allocation, no lock).
fn close_range_cloexec() -> Result<(), i32> {
    const FIRST: libc::c_uint = 3;
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing and
    // touches no memory of ours; it only sets a flag on the descriptors
    // in the range. Errors (ENOSYS, EINVAL on older kernels) are returned.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            FIRST,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS))
    }
}

/// Make `command`'s child get what a service started by the bus gets,
/// whatever the bus holds (dbus-daemon's `child_setup` and its closing of
/// every descriptor): nothing open but stdin, stdout and stderr, and
/// `fd_limit`, the open-file limit the bus started with, instead of the
/// one it raised for itself (`crate::fd_limit`).
///
/// Descriptors are marked close-on-exec rather than closed: std's spawn
/// keeps a close-on-exec pipe open in the child to report a failed exec,
/// and closing it would turn every exec failure into a child exiting 1.
pub fn start_as_service(command: &mut Command, fd_limit: rustix::process::Rlimit) {
    // Without close_range, the child marks every number up to the highest
    // open one, read here in the parent when the loop builds the command.
    // The fork comes later, on the spawner's thread (`spawner`), and
    // descriptors may open meanwhile; but every descriptor the daemon
    // opens is close-on-exec from the start (std's, rustix's and mio's
    // calls, fds received with MSG_CMSG_CLOEXEC): those without the flag
    // were inherited at start-up, below this number. Not the open-file
    // limit, which the bus raised, up to a million and more: a loop that
    // long would hold the service's start for seconds.
    let highest = match close_range_cloexec_works() {
        true => None,
        false => highest_open_fd().ok(),
    };
    let clean = move || -> io::Result<()> {
        match highest {
            None => {
                let _ = close_range_cloexec();
            }
            Some(highest) => mark_close_on_exec_up_to(highest),
        }
        // Lowering is always allowed; a failure leaves the raised limit
        // (dbus-daemon too starts the service anyway).
        let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, fd_limit);
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It makes only
    // raw system calls (close_range or fcntl, then prlimit64) on values
    // prepared in the parent: no allocation, no lock, nothing the fork can
    // have left inconsistent. Its errors are ignored, so it never builds an
    // io::Error.
    unsafe {
        command.pre_exec(clean);
    }
}

/// Make the child `command` starts write its pid (4 bytes, native order)
/// to `to` before it executes its program: the spawn that would return
/// the pid does not return while the exec is stuck (`spawner`), and a
/// child stuck there must still be killable. Then it reads `stop_from`
/// (which does not block): a byte there means its activation was stopped
/// before the pid could be read, and it exits (status 1) without
/// executing anything.
pub fn report_pid_before_exec(command: &mut Command, to: OwnedFd, stop_from: OwnedFd) {
    let report = move || -> io::Result<()> {
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let _ = rustix::io::write(&to, &pid.to_ne_bytes());
        let mut word = [0u8; 1];
        if rustix::io::read(&stop_from, &mut word) == Ok(1) {
            exit_now(1);
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It makes raw
    // system calls (getpid, write, read, _exit) on descriptors opened in
    // the parent: no allocation, no lock. Its errors are ignored (the pid
    // is then not reported, and the child is killed once the spawn
    // returns; the word not read, and the child killed the same way).
    unsafe {
        command.pre_exec(report);
    }
}

/// Make the child `command` starts wait before it executes its program
/// until something is written to the FIFO `fifo` (or a writer of it
/// closes it), `at_most` milliseconds: a child stuck before its exec, for
/// the spawner's tests (`spawner::STALL_SPAWN_FOR_TESTS`).
pub fn wait_before_exec(command: &mut Command, fifo: &Path, at_most_ms: i32) -> io::Result<()> {
    let fifo = std::ffi::CString::new(fifo.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a FIFO path with a NUL"))?;
    let wait = move || -> io::Result<()> {
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK;
        if let Ok(fd) = rustix::fs::open(fifo.as_c_str(), flags, rustix::fs::Mode::empty()) {
            // A FIFO no writer opened yet is neither readable nor hung up.
            let mut ready = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let _ = rustix::event::poll(&mut ready, at_most_ms);
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It makes raw
    // system calls (open, poll, close) on values prepared in the parent
    // (a `CStr` passes as it is): no allocation, no lock. Its errors are
    // ignored.
    unsafe {
        command.pre_exec(wait);
    }
    Ok(())
}

/// Credentials of the process at the other end of a connected unix socket,
/// from the kernel (`SO_PEERCRED`), never from what the peer says.
pub fn peer_credentials(socket: impl AsFd) -> io::Result<Credentials> {
    let cred = rustix::net::sockopt::get_socket_peercred(&socket)?;
    let pid = cred.pid.as_raw_nonzero().get() as u32;
    let gid = cred.gid.as_raw();
    let groups = peer_groups(socket.as_fd(), gid);
    Ok(Credentials {
        uid: cred.uid.as_raw(),
        gid,
        pid: Some(pid),
        groups,
        security_label: peer_security_label(socket.as_fd()),
        process_started: process_start_time(pid),
        ..Credentials::default()
    })
}

/// A pidfd of `pid`, if that pid still names the process that started at
/// `started` (see [`process_start_time`]), for GetConnectionCredentials
/// ([`quickbus_bus::Action::OpenPidfd`]): the pid and its start time are
/// recorded at connect time and each request opens `pidfd_open(pid)`,
/// since a pid may be reused by another process started later. Holding a
/// pidfd per connection instead (`SO_PEERPIDFD`) would double the daemon's
/// open files. Checked after opening: once the
/// pidfd pins a process, a matching start time proves it is the one meant.
pub fn open_pidfd_verified(pid: u32, started: u64) -> io::Result<OwnedFd> {
    let gone = || io::Error::new(io::ErrorKind::NotFound, format!("process {pid} is gone"));
    let raw = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    let pidfd =
        rustix::process::pidfd_open(raw.ok_or_else(gone)?, rustix::process::PidfdFlags::empty())?;
    if process_start_time(pid) != Some(started) {
        return Err(gone());
    }
    Ok(pidfd)
}

/// When process `pid` started, in clock ticks after boot (field 22 of
/// `/proc/PID/stat`); with the pid it names one process for good.
pub fn process_start_time(pid: u32) -> Option<u64> {
    start_time_in_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn start_time_in_stat(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count
    // fields from after its last ')'. There, field 3 (state) is first.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The peer's LSM label (`SO_PEERSEC`: SELinux context, AppArmor
/// profile, ...), without trailing NULs; None when the kernel has no LSM
/// that labels sockets (ENOPROTOOPT) or the label is empty.
fn peer_security_label(socket: BorrowedFd<'_>) -> Option<Vec<u8>> {
    let mut label = vec![0u8; 256];
    loop {
        let mut len = label.len() as libc::socklen_t;
        // SAFETY: `label` is valid for writes of `len` bytes and `len` is a
        // live socklen_t; the kernel writes at most `len` bytes and stores
        // the length it needs or wrote. The fd is borrowed, so open.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERSEC,
                label.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = len as usize;
        if rc == 0 {
            label.truncate(len.min(label.len()));
            while label.last() == Some(&0) {
                label.pop();
            }
            return (!label.is_empty()).then_some(label);
        }
        let too_small = io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE);
        if !too_small || len <= label.len() || len > 65536 {
            return None;
        }
        label.resize(len, 0);
    }
}

/// The peer's groups when it connected (`SO_PEERGROUPS`), with its primary
/// group `gid` added as dbus-daemon 1.14 adds it (so a peer that dropped
/// its supplementary groups has just its primary one); empty only if the
/// kernel has no SO_PEERGROUPS (before Linux 4.13), where dbus-daemon too
/// asks the user database.
fn peer_groups(socket: BorrowedFd<'_>, gid: u32) -> Vec<u32> {
    // 64 groups first; the kernel says how much room it needs if more.
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let room = std::mem::size_of_val(groups.as_slice());
        let mut len = room as libc::socklen_t;
        // SAFETY: `groups` is valid for writes of `len` bytes (its length
        // times the size of gid_t) and `len` is a live socklen_t; the
        // kernel writes at most `len` bytes of gid_t values and stores the
        // length it wrote or needs. The fd is borrowed, so open.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = len as usize;
        if rc == 0 {
            let count = len.min(room) / std::mem::size_of::<libc::gid_t>();
            groups.truncate(count);
            if !groups.contains(&gid) {
                groups.push(gid);
            }
            return groups;
        }
        let too_small = io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE);
        // NGROUPS_MAX is 65536: anything claiming more is not believed.
        if !too_small || len <= room || len > 65536 * std::mem::size_of::<libc::gid_t>() {
            return Vec::new();
        }
        groups.resize(len.div_ceil(std::mem::size_of::<libc::gid_t>()), 0);
    }
}

/// 16 random bytes from the kernel (falling back on time and pid if
/// getrandom is unavailable): bus GUIDs and socket names.
pub fn random_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break, // fall back on time and pid below
        }
    }
    if filled < bytes.len() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = (t ^ ((std::process::id() as u128) << 64)).to_le_bytes();
    }
    bytes
}

/// 16 random bytes as 32 lowercase hex digits: the bus GUID.
pub fn random_guid() -> String {
    hex(&random_bytes())
}

/// The machine id D-Bus peers expect from Peer.GetMachineId: the
/// system's, or (on a machine without one) a stable id derived from the
/// boot id, so a session bus still works in a bare container.
pub fn machine_id() -> String {
    for path in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(text) = std::fs::read_to_string(path) {
            let id = text.trim();
            if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return id.to_ascii_lowercase();
            }
        }
    }
    if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let id: String = boot.trim().chars().filter(|c| *c != '-').collect();
        if id.len() == 32 {
            return id;
        }
    }
    random_guid()
}

/// Part of a memfd mapped read-only and shared: a restart's large message
/// buffers, which the new image reads in place instead of copying them
/// during the pause (`restart::mapped`). Unmapped on drop.
pub struct MappedMemfd {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only memory that no thread owns; `slice`
// hands out shared references only.
unsafe impl Send for MappedMemfd {}
// SAFETY: as above: concurrent reads of read-only memory.
unsafe impl Sync for MappedMemfd {}

impl MappedMemfd {
    /// Map `len` (> 0) bytes of `memfd` from `offset` (a multiple of the
    /// page size).
    ///
    /// `memfd` must be sealed against shrinking, which is checked: every
    /// mapped byte then stays backed by the file, so no access faults with
    /// SIGBUS. The caller must not write a range while a slice of it is
    /// borrowed (a restart punches a hole only where no buffer lies any
    /// more).
    pub fn map(memfd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<MappedMemfd> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "nothing to map",
            ));
        }
        if !rustix::fs::fcntl_get_seals(memfd)?.contains(rustix::fs::SealFlags::SHRINK) {
            return Err(io::Error::other("the memfd can shrink under a mapping"));
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: a new mapping at an address the kernel picks, so no
        // memory of the process is replaced; the arguments are checked by
        // the kernel (a bad offset or length fails with EINVAL).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(MappedMemfd { ptr, len })
    }

    /// The `len` bytes at `at` of the mapping (only those: the rest may
    /// be punched out meanwhile). Panics if they are not all mapped.
    pub fn slice(&self, at: usize, len: usize) -> &[u8] {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "bytes {at}+{len} outside a mapping of {}",
            self.len
        );
        // SAFETY: `at..at + len` lies within the live mapping of `len`
        // readable bytes (checked above), which stays until drop (the
        // slice borrows `self`); the file cannot shrink (checked at map),
        // so every byte is backed; and the caller writes no range that a
        // slice borrows (`map`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(at), len) }
    }
}

impl Drop for MappedMemfd {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, made by `map` with this length, and
        // no slice of it outlives `self` (`bytes` borrows `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_marks_every_open_descriptor_up_to_the_highest() {
        // Descriptors made inheritable here must not reach a child another
        // test forks meanwhile.
        let _alone = crate::test_forks::no_forks();
        let files: Vec<std::fs::File> = (0..3)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        for file in &files {
            set_close_on_exec(file.as_raw_fd(), false).unwrap();
        }
        let highest = highest_open_fd().unwrap();
        assert!(files.iter().all(|f| f.as_raw_fd() <= highest));
        mark_close_on_exec_up_to(highest);
        for file in &files {
            let flags = rustix::io::fcntl_getfd(file).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        }
    }

    #[test]
    fn recv_appends_bytes_and_every_fd_of_the_message() {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let (ours, peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let pipes: Vec<_> = (0..3)
            .map(|_| rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap())
            .collect();
        let sent: Vec<_> = pipes.iter().map(|(r, _)| r.as_fd()).collect();
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&sent));
        let data = [io::IoSlice::new(b"abc")];
        rustix::net::sendmsg(&peer, &data, &mut control, SendFlags::empty()).unwrap();

        let mut buf = bytes::BytesMut::from(&b"xy"[..]);
        let mut fds = std::collections::VecDeque::new();
        let (got, got_fds) = recv_appending(&ours, &mut buf, 64, &mut fds).unwrap();
        assert_eq!((got, got_fds), (3, true));
        assert_eq!(&buf[..], b"xyabc");
        assert_eq!(fds.len(), 3);
        for (fd, (_, write_end)) in fds.iter().zip(&pipes) {
            let flags = rustix::io::fcntl_getfd(fd).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
            // Each received fd is the read end of the matching pipe.
            rustix::io::write(write_end, b"!").unwrap();
            let mut one = [0u8; 1];
            assert_eq!(rustix::io::read(fd, &mut one).unwrap(), 1);
        }

        // Nothing left: EAGAIN, the buffer untouched; then EOF reads 0.
        let empty = recv_appending(&ours, &mut buf, 64, &mut fds);
        assert_eq!(empty, Err(rustix::io::Errno::AGAIN));
        // Shut down rather than drop: another test forking at this moment
        // holds a copy of `peer` until its child execs or exits, and the
        // end of file would wait for that copy too.
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(
            recv_appending(&ours, &mut buf, 64, &mut fds),
            Ok((0, false))
        );
        assert_eq!(&buf[..], b"xyabc");
    }

    #[test]
    fn recv_reads_no_more_than_asked() {
        let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut peer, &[5u8; 100]).unwrap();
        let mut buf = bytes::BytesMut::new();
        let mut fds = std::collections::VecDeque::new();
        assert_eq!(
            recv_appending(&ours, &mut buf, 40, &mut fds),
            Ok((40, false))
        );
        assert_eq!(
            recv_appending(&ours, &mut buf, 400, &mut fds),
            Ok((60, false))
        );
        assert_eq!(&buf[..], &[5u8; 100][..]);
    }

    #[test]
    fn guid_is_32_hex_digits_and_random() {
        let a = random_guid();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_guid());
    }

    #[test]
    fn machine_id_is_32_hex_digits() {
        let id = machine_id();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn peer_credentials_are_our_own_over_a_socketpair() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let creds = peer_credentials(&a).unwrap();
        assert_eq!(creds.uid, rustix::process::getuid().as_raw());
        assert_eq!(creds.pid, Some(std::process::id()));
        // The kernel's list is our own supplementary groups plus our gid.
        let mut own: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        let mut got = creds.groups.clone();
        if !own.contains(&creds.gid) {
            own.push(creds.gid);
        }
        own.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, own);
    }

    /// The pid a pidfd refers to, from its fdinfo.
    fn pid_of_pidfd(fd: &OwnedFd) -> Option<u32> {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
        let line = info.lines().find(|l| l.starts_with("Pid:"))?;
        line["Pid:".len()..].trim().parse().ok()
    }

    #[test]
    fn process_fds_open_on_demand_and_pin_the_connecting_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let creds = peer_credentials(&a).unwrap();
        let pid = creds.pid.unwrap();
        let started = creds
            .process_started
            .expect("our own process has a start time");
        let pidfd = open_pidfd_verified(pid, started).unwrap();
        assert_eq!(pid_of_pidfd(&pidfd), Some(std::process::id()));
        let flags = rustix::io::fcntl_getfd(&pidfd).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        // Each request opens its own.
        let again = open_pidfd_verified(pid, started).unwrap();
        assert_ne!(again.as_raw_fd(), pidfd.as_raw_fd());
    }

    #[test]
    fn a_pid_with_another_start_time_gives_no_pidfd() {
        let me = std::process::id();
        let started = process_start_time(me).unwrap();
        assert!(open_pidfd_verified(me, started).is_ok());
        assert!(open_pidfd_verified(me, started + 1).is_err());
        assert!(open_pidfd_verified(u32::MAX, started).is_err());
    }

    #[test]
    fn start_times_survive_odd_command_names() {
        // A process named "a) b" would fool a parser that splits at the
        // first ')'.
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(start_time_in_stat(stat), Some(987_654));
        assert_eq!(start_time_in_stat("42 (x) S 1"), None);
    }

    #[test]
    fn adopting_a_closed_fd_number_is_an_error() {
        assert!(adopt_inherited_fd(987_654).is_err());
        assert!(adopt_inherited_fd(-1).is_err());
    }
}
