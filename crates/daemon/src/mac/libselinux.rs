//! The few libselinux calls SELinux mediation needs: the userspace access
//! vector cache (AVC), exactly as dbus-daemon's `bus/selinux.c` uses it.
//!
//! Why not the `selinux` crate: its AVC wrapper has no access check (the
//! `unsafe` `avc_has_perm` call would be ours anyway), and its `-sys`
//! crate runs bindgen, so every build of the daemon would need clang and
//! libselinux's headers. Instead libselinux.so.1, which every SELinux
//! system has, is opened at run time with `libloading`, and only when
//! SELinux is enabled: a machine without it loads nothing.
//!
//! This module holds the `unsafe` FFI; everything it exports is safe. It
//! and `sys` are the daemon's only modules allowed `unsafe_code`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::fmt::Write as _;
use std::io;
use std::sync::OnceLock;

use libloading::Library;

/// libselinux's `security_id_t`: a pointer into its SID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sid(*mut c_void);

// SAFETY: a SID is an entry of libselinux's process-wide SID table, which
// is never freed while the AVC is open (we never call avc_destroy), so the
// pointer stays valid on any thread. The daemon only uses it from its one
// event loop, never from two threads at once.
unsafe impl Send for Sid {}
// SAFETY: as above; a Sid is only ever passed back to libselinux by value.
unsafe impl Sync for Sid {}

type IsEnabled = unsafe extern "C" fn() -> c_int;
type AvcOpen = unsafe extern "C" fn(*const c_void, c_uint) -> c_int;
type ContextToSid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type StringToClass = unsafe extern "C" fn(*const c_char) -> u16;
type StringToPerm = unsafe extern "C" fn(u16, *const c_char) -> u32;
type DenyUnknown = unsafe extern "C" fn() -> c_int;
type HasPerm =
    unsafe extern "C" fn(*mut c_void, *mut c_void, u16, u32, *mut c_void, *mut c_void) -> c_int;
type AuditCallback = unsafe extern "C" fn(*mut c_void, u16, *mut c_char, usize) -> c_int;
type PolicyLoadCallback = unsafe extern "C" fn(c_int) -> c_int;

/// libselinux's `union selinux_callback` (one function pointer).
#[repr(C)]
#[derive(Clone, Copy)]
union Callback {
    audit: AuditCallback,
    policyload: PolicyLoadCallback,
}
type SetCallback = unsafe extern "C" fn(c_int, Callback);

/// `SELINUX_CB_AUDIT` and `SELINUX_CB_POLICYLOAD` of <selinux/selinux.h>.
const SELINUX_CB_AUDIT: c_int = 1;
const SELINUX_CB_POLICYLOAD: c_int = 4;

/// The opened AVC: the library and the functions taken from it.
pub struct Avc {
    _lib: Library,
    context_to_sid: ContextToSid,
    string_to_class: StringToClass,
    string_to_perm: StringToPerm,
    deny_unknown: DenyUnknown,
    has_perm: HasPerm,
}

/// What an audit record says after "for" (dbus-daemon's auxdata), built
/// only when libselinux writes a record.
pub enum AuditData<'a> {
    Acquire {
        name: &'a str,
        spid: Option<u32>,
    },
    Send {
        msgtype: &'a str,
        interface: Option<&'a str>,
        member: Option<&'a str>,
        error_name: Option<&'a str>,
        dest: &'a str,
        spid: Option<u32>,
        tpid: Option<u32>,
    },
}

impl AuditData<'_> {
    /// dbus-daemon's text: `service=NAME spid=N` or `msgtype=... dest=...`.
    pub fn text(&self) -> String {
        let mut t = String::new();
        match self {
            AuditData::Acquire { name, spid } => {
                let _ = write!(t, "service={name}");
                if let Some(pid) = spid.filter(|&p| p != 0) {
                    let _ = write!(t, " spid={pid}");
                }
            }
            AuditData::Send {
                msgtype,
                interface,
                member,
                error_name,
                dest,
                spid,
                tpid,
            } => {
                let _ = write!(t, "msgtype={msgtype}");
                for (key, value) in [
                    ("interface", interface),
                    ("member", member),
                    ("error_name", error_name),
                ] {
                    if let Some(v) = value {
                        let _ = write!(t, " {key}={v}");
                    }
                }
                let _ = write!(t, " dest={dest}");
                if let Some(pid) = spid.filter(|&p| p != 0) {
                    let _ = write!(t, " spid={pid}");
                }
                if let Some(pid) = tpid.filter(|&p| p != 0) {
                    let _ = write!(t, " tpid={pid}");
                }
            }
        }
        t
    }
}

/// libselinux asks for the auxiliary text of an audit record.
unsafe extern "C" fn audit_callback(
    data: *mut c_void,
    _class: u16,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    if data.is_null() || buf.is_null() || len == 0 {
        return 0;
    }
    // SAFETY: `data` is the `&AuditData` that `Avc::check` passed to
    // avc_has_perm, which calls this back synchronously, during that
    // call, while the borrow is alive.
    let audit = unsafe { &*(data as *const AuditData<'_>) };
    let mut text = audit.text().into_bytes();
    if text.len() >= len {
        text = b"Buffer too small for audit message".to_vec();
        text.truncate(len - 1);
    }
    // SAFETY: libselinux gives `buf` with room for `len` bytes; we write
    // at most len - 1 bytes and the NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    0
}

/// The system's policy was reloaded: reload the configuration too (its
/// `<associate>` contexts may mean something else now), as dbus-daemon
/// does by raising SIGHUP.
unsafe extern "C" fn policyload_callback(_seqno: c_int) -> c_int {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::Hup);
    0
}

fn open_error(e: &dyn std::fmt::Display) -> String {
    format!("Failed to start Access Vector Cache (AVC): {e}")
}

static AVC: OnceLock<Result<Avc, String>> = OnceLock::new();

impl Avc {
    /// Whether SELinux is enabled, as libselinux's `is_selinux_enabled`
    /// says; false without libselinux.
    pub fn selinux_enabled() -> bool {
        // SAFETY: loading libselinux runs its constructors, which only
        // read /proc and selinuxfs; it is the library dbus-daemon links.
        let Ok(lib) = (unsafe { Library::new("libselinux.so.1") }) else {
            return false;
        };
        // SAFETY: the symbol has this signature in every libselinux.
        let Ok(f) = (unsafe { lib.get::<IsEnabled>(b"is_selinux_enabled\0") }) else {
            return false;
        };
        // SAFETY: no arguments; reads selinuxfs.
        unsafe { f() == 1 }
    }

    /// Open the process's AVC once (it follows enforcing mode and policy
    /// reloads by itself, through the kernel's status page or netlink) and
    /// install the audit and policy-load callbacks.
    pub fn get() -> Result<&'static Avc, String> {
        AVC.get_or_init(Avc::open).as_ref().map_err(Clone::clone)
    }

    /// The AVC, if `get` opened it (at start).
    pub fn opened() -> Option<&'static Avc> {
        AVC.get()?.as_ref().ok()
    }

    fn open() -> Result<Avc, String> {
        let (avc, avc_open, set_callback) = Avc::load()?;
        // SAFETY: avc_open with no options (the system's enforcing mode,
        // libselinux's own notification handling); callbacks of the
        // signatures libselinux expects, valid for the whole process.
        unsafe {
            if avc_open(std::ptr::null(), 0) < 0 {
                return Err(open_error(&io::Error::last_os_error()));
            }
            set_callback(
                SELINUX_CB_AUDIT,
                Callback {
                    audit: audit_callback,
                },
            );
            set_callback(
                SELINUX_CB_POLICYLOAD,
                Callback {
                    policyload: policyload_callback,
                },
            );
        }
        Ok(avc)
    }

    /// Load libselinux and take every function from it.
    fn load() -> Result<(Avc, AvcOpen, SetCallback), String> {
        let err = |e: libloading::Error| open_error(&e);
        // SAFETY: as in `selinux_enabled`.
        let lib = unsafe { Library::new("libselinux.so.1") }.map_err(err)?;
        // SAFETY: each symbol is looked up with the signature libselinux
        // declares for it in <selinux/avc.h> and <selinux/selinux.h>.
        unsafe {
            let avc_open = *lib.get::<AvcOpen>(b"avc_open\0").map_err(err)?;
            let set_callback = *lib
                .get::<SetCallback>(b"selinux_set_callback\0")
                .map_err(err)?;
            let avc = Avc {
                context_to_sid: *lib
                    .get::<ContextToSid>(b"avc_context_to_sid\0")
                    .map_err(err)?,
                string_to_class: *lib
                    .get::<StringToClass>(b"string_to_security_class\0")
                    .map_err(err)?,
                string_to_perm: *lib
                    .get::<StringToPerm>(b"string_to_av_perm\0")
                    .map_err(err)?,
                deny_unknown: *lib
                    .get::<DenyUnknown>(b"security_deny_unknown\0")
                    .map_err(err)?,
                has_perm: *lib.get::<HasPerm>(b"avc_has_perm\0").map_err(err)?,
                _lib: lib,
            };
            Ok((avc, avc_open, set_callback))
        }
    }

    /// The SID of a context; None for a context the policy does not know.
    pub fn sid(&self, context: &[u8]) -> Option<Sid> {
        let context = CString::new(context).ok()?;
        let mut sid = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a place for the result.
        let r = unsafe { (self.context_to_sid)(context.as_ptr(), &mut sid) };
        (r == 0 && !sid.is_null()).then_some(Sid(sid))
    }

    /// May `source` do `perm` on `target` in `class`? libselinux audits as
    /// the policy says (with `audit` as the record's auxiliary text) and,
    /// in permissive mode or for a permissive domain, logs and allows.
    pub fn check(
        &self,
        source: Sid,
        target: Sid,
        class: &std::ffi::CStr,
        perm: &std::ffi::CStr,
        audit: &AuditData<'_>,
    ) -> bool {
        // SAFETY: NUL-terminated names.
        let class_id = unsafe { (self.string_to_class)(class.as_ptr()) };
        if class_id == 0 {
            return self.allows_unknown();
        }
        // SAFETY: as above.
        let perm_bit = unsafe { (self.string_to_perm)(class_id, perm.as_ptr()) };
        if perm_bit == 0 {
            return self.allows_unknown();
        }
        // SAFETY: SIDs from avc_context_to_sid; no entry reference; the
        // audit data outlives the call (see `audit_callback`).
        let r = unsafe {
            (self.has_perm)(
                source.0,
                target.0,
                class_id,
                perm_bit,
                std::ptr::null_mut(),
                audit as *const AuditData<'_> as *mut c_void,
            )
        };
        r == 0
    }

    /// A policy without the dbus class or permission: allowed only when
    /// the policy says unknown classes are allowed (dbus-daemon's rule).
    fn allows_unknown(&self) -> bool {
        // SAFETY: no arguments.
        unsafe { (self.deny_unknown)() == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libselinux1 is on every Debian system (coreutils needs it): every
    /// function this module takes must be there, under these names.
    #[test]
    fn every_function_is_found_in_the_systems_libselinux() {
        if let Err(e) = Avc::load() {
            panic!("{e}");
        }
    }

    #[test]
    fn send_audit_text_is_dbus_daemons() {
        let a = AuditData::Send {
            msgtype: "method_call",
            interface: Some("org.example.I"),
            member: Some("Ping"),
            error_name: None,
            dest: "org.example.Secret",
            spid: Some(12),
            tpid: Some(0),
        };
        assert_eq!(
            a.text(),
            "msgtype=method_call interface=org.example.I member=Ping dest=org.example.Secret spid=12"
        );
    }

    #[test]
    fn acquire_audit_text_is_dbus_daemons() {
        let a = AuditData::Acquire {
            name: "org.example.Secret",
            spid: Some(7),
        };
        assert_eq!(a.text(), "service=org.example.Secret spid=7");
    }

    #[test]
    fn the_audit_callback_writes_a_terminated_text_or_says_it_is_too_small() {
        let a = AuditData::Acquire {
            name: "org.x",
            spid: None,
        };
        let mut buf = [0x55 as c_char; 64];
        // SAFETY: a live AuditData and a 64-byte buffer, as libselinux
        // would pass them.
        unsafe {
            audit_callback(
                &a as *const AuditData<'_> as *mut c_void,
                0,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        // SAFETY: the callback terminated the text.
        let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "service=org.x");
        let mut small = [0x55 as c_char; 8];
        // SAFETY: as above, an 8-byte buffer.
        unsafe {
            audit_callback(
                &a as *const AuditData<'_> as *mut c_void,
                0,
                small.as_mut_ptr(),
                small.len(),
            )
        };
        // SAFETY: as above.
        let text = unsafe { std::ffi::CStr::from_ptr(small.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "Buffer ");
    }
}
