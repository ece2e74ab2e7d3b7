//! Users and groups as the system resolves them: a user that only an NSS
//! module knows (libnss-extrausers, enabled for the daemon alone in a
//! mount namespace) is named by `user=` and `group=` policies, and a
//! client's supplementary groups as the kernel reports them
//! (`SO_PEERGROUPS`) match `group=` policies even where the user database
//! does not list it in the group. dbus-daemon behaves the same.
//!
//! Both run clients as other users: the tests run as root.

use std::process::Command;

use quickbus_e2e::namespace::{start_namespaced, write_extrausers, NSS_MOUNTS};
use quickbus_e2e::{run_bounded, write_config_with, Bus, Finished, Listen, TempDir};

/// The user and its groups only extrausers provides.
const NSS_USER: &str = "qbnssuser";
const NSS_UID: u32 = 4242;
const NSS_GROUP: &str = "qbnssgroup";
const NSS_GID: u32 = 4343;

/// `nobody`, `nogroup` and `daemon`'s group on Debian.
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;
const DAEMON_GROUP: &str = "daemon";
const DAEMON_GID: u32 = 1;

/// Owning `name` is refused by default and allowed by `scoped` rules.
fn policy_for(name: &str, scope: &str) -> String {
    format!(
        r#"<policy context="default"><deny own="{name}"/></policy>
  <policy {scope}><allow own="{name}"/></policy>"#
    )
}

fn request_name(mut client: Command, name: &str) -> Finished {
    run_bounded(client.args([
        "--session",
        "--print-reply",
        "--dest=org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.RequestName",
        &format!("string:{name}"),
        "uint32:0",
    ]))
}

fn assert_owned(result: Finished) {
    let result = result.success();
    assert!(result.stdout.contains("uint32 1"), "{result:#?}");
}

/// A daemon whose NSS also reads `dir/extrausers` (libnss-extrausers):
/// /etc/nsswitch.conf and /var/lib/extrausers are replaced in a mount
/// namespace of its own, so nothing else on the machine sees the user.
fn start_with_nss_user(dir: TempDir, extra: &str) -> Bus {
    write_extrausers(
        dir.path(),
        &format!("{NSS_USER}:x:{NSS_UID}:{NSS_UID}::/nonexistent:/usr/sbin/nologin\n"),
        &format!("{NSS_USER}:x:{NSS_UID}:\n{NSS_GROUP}:x:{NSS_GID}:{NSS_USER}\n"),
    );
    assert!(
        !std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .contains(NSS_USER),
        "{NSS_USER} must be unknown to /etc/passwd for this test to mean anything"
    );
    let config = write_config_with(dir.path(), Listen::UnixPath, extra);
    start_namespaced(dir, NSS_MOUNTS, &config)
}

#[test]
fn a_user_only_nss_knows_is_named_by_user_and_group_policies() {
    let extra = [
        policy_for("org.example.ForUser", &format!(r#"user="{NSS_USER}""#)),
        policy_for("org.example.ForGroup", &format!(r#"group="{NSS_GROUP}""#)),
    ]
    .concat();
    let bus = start_with_nss_user(TempDir::new(), &extra);
    // The user's connection is allowed at all only if the daemon finds
    // the uid in the user database.
    let client = bus.client_as("dbus-send", NSS_UID, NSS_UID);
    assert_owned(request_name(client, "org.example.ForUser"));
    // The client's groups as initgroups would set them (the kernel's list
    // decides group policies); the group's name resolves through NSS.
    let mut member = bus.client("setpriv");
    member.args([
        &format!("--reuid={NSS_UID}"),
        &format!("--regid={NSS_UID}"),
        &format!("--groups={NSS_GID}"),
        "dbus-send",
    ]);
    assert_owned(request_name(member, "org.example.ForGroup"));
    // Anyone else is still refused.
    let other = bus.client_as("dbus-send", NOBODY, NOGROUP);
    let refused = request_name(other, "org.example.ForUser").failure();
    assert!(
        refused.stderr.contains("AccessDenied"),
        "{refused:#?}; daemon: {}",
        bus.log()
    );
}

#[test]
fn the_kernels_supplementary_groups_match_group_policies() {
    let extra = policy_for(
        "org.example.ForDaemonGroup",
        &format!(r#"group="{DAEMON_GROUP}""#),
    );
    let bus = Bus::start_configured(|dir| write_config_with(dir, Listen::UnixPath, &extra));
    // nobody is in no group but nogroup in the user database; this client
    // runs with `daemon` as a supplementary group all the same.
    let mut with_group = bus.client("setpriv");
    with_group.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOGROUP}"),
        &format!("--groups={DAEMON_GID}"),
        "dbus-send",
    ]);
    assert_owned(request_name(with_group, "org.example.ForDaemonGroup"));
    // Without it, refused.
    let without = bus.client_as("dbus-send", NOBODY, NOGROUP);
    let refused = request_name(without, "org.example.ForDaemonGroup").failure();
    assert!(refused.stderr.contains("AccessDenied"), "{refused:#?}");
}
