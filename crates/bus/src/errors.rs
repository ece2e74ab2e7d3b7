//! The D-Bus error names the bus sends.
//!
//! Owns: the error names and [`BusError`]; touches nothing.

pub const FAILED: &str = "org.freedesktop.DBus.Error.Failed";
pub const SERVICE_UNKNOWN: &str = "org.freedesktop.DBus.Error.ServiceUnknown";
pub const NAME_HAS_NO_OWNER: &str = "org.freedesktop.DBus.Error.NameHasNoOwner";
pub const NO_REPLY: &str = "org.freedesktop.DBus.Error.NoReply";
pub const LIMITS_EXCEEDED: &str = "org.freedesktop.DBus.Error.LimitsExceeded";
pub const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
pub const INVALID_ARGS: &str = "org.freedesktop.DBus.Error.InvalidArgs";
pub const UNKNOWN_METHOD: &str = "org.freedesktop.DBus.Error.UnknownMethod";
pub const UNKNOWN_INTERFACE: &str = "org.freedesktop.DBus.Error.UnknownInterface";
pub const UNKNOWN_PROPERTY: &str = "org.freedesktop.DBus.Error.UnknownProperty";
pub const PROPERTY_READ_ONLY: &str = "org.freedesktop.DBus.Error.PropertyReadOnly";
pub const MATCH_RULE_INVALID: &str = "org.freedesktop.DBus.Error.MatchRuleInvalid";
pub const MATCH_RULE_NOT_FOUND: &str = "org.freedesktop.DBus.Error.MatchRuleNotFound";
pub const SPAWN_FAILED: &str = "org.freedesktop.DBus.Error.Spawn.Failed";
pub const SPAWN_EXEC_FAILED: &str = "org.freedesktop.DBus.Error.Spawn.ExecFailed";
pub const SPAWN_CHILD_EXITED: &str = "org.freedesktop.DBus.Error.Spawn.ChildExited";
pub const SPAWN_CHILD_SIGNALED: &str = "org.freedesktop.DBus.Error.Spawn.ChildSignaled";
pub const SPAWN_SERVICE_NOT_FOUND: &str = "org.freedesktop.DBus.Error.Spawn.ServiceNotFound";
pub const SPAWN_SETUP_FAILED: &str = "org.freedesktop.DBus.Error.Spawn.FailedToSetup";
pub const SPAWN_PERMISSIONS_INVALID: &str = "org.freedesktop.DBus.Error.Spawn.PermissionsInvalid";
pub const SPAWN_CONFIG_INVALID: &str = "org.freedesktop.DBus.Error.Spawn.ConfigInvalid";
pub const SPAWN_SERVICE_INVALID: &str = "org.freedesktop.DBus.Error.Spawn.ServiceNotValid";
pub const SPAWN_FILE_INVALID: &str = "org.freedesktop.DBus.Error.Spawn.FileInvalid";
pub const NO_MEMORY: &str = "org.freedesktop.DBus.Error.NoMemory";
pub const TIMED_OUT: &str = "org.freedesktop.DBus.Error.TimedOut";
pub const NOT_SUPPORTED: &str = "org.freedesktop.DBus.Error.NotSupported";
pub const UNIX_PROCESS_ID_UNKNOWN: &str = "org.freedesktop.DBus.Error.UnixProcessIdUnknown";
pub const ADT_AUDIT_DATA_UNKNOWN: &str = "org.freedesktop.DBus.Error.AdtAuditDataUnknown";
pub const NOT_CONTAINER: &str = "org.freedesktop.DBus.Error.NotContainer";
pub const FILE_NOT_FOUND: &str = "org.freedesktop.DBus.Error.FileNotFound";
pub const ADDRESS_IN_USE: &str = "org.freedesktop.DBus.Error.AddressInUse";
pub const SELINUX_SECURITY_CONTEXT_UNKNOWN: &str =
    "org.freedesktop.DBus.Error.SELinuxSecurityContextUnknown";

/// An error the bus answers a call with: a D-Bus error name and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusError {
    pub name: &'static str,
    pub message: String,
}

impl BusError {
    pub fn new(name: &'static str, message: impl Into<String>) -> BusError {
        BusError {
            name,
            message: message.into(),
        }
    }
}
