//! quickbus's `<limit name="socket_buffer_bytes">`: the SO_SNDBUF and
//! SO_RCVBUF of every accepted connection, read back from the kernel with
//! `ss` (iproute2), which shows each socket's buffer sizes and owner.

use std::process::Command;

use quickbus_client::Connection;
use quickbus_e2e::{run_bounded, skip, Bus, Listen};

/// `(rcvbuf, sndbuf)` of every Unix stream socket process `pid` holds:
/// the `rb` and `tb` fields of `ss -x -m -p`'s `skmem:(...)`.
fn socket_buffers_of(pid: u32) -> Vec<(u64, u64)> {
    let out = run_bounded(Command::new("ss").args(["-x", "-m", "-p"])).success();
    let owner = format!(",pid={pid},");
    out.stdout
        .lines()
        .filter(|line| line.starts_with("u_str") && line.contains(&owner))
        .filter_map(|line| {
            let skmem = &line[line.find("skmem:(")? + 7..];
            let skmem = &skmem[..skmem.find(')')?];
            let field = |name: &str| -> Option<u64> {
                skmem
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.parse().ok())
            };
            Some((field("rb")?, field("tb")?))
        })
        .collect()
}

#[test]
fn accepted_connections_get_the_configured_socket_buffers() {
    // dbus-daemon has no such limit and refuses the file.
    if skip::quickbus_only("the socket_buffer_bytes limit") {
        return;
    }
    // Below any wmem_max, and not the usual 208 KiB default.
    let asked = 96 * 1024;
    let bus = Bus::start_with_config(
        Listen::UnixPath,
        &format!(r#"<limit name="socket_buffer_bytes">{asked}</limit>"#),
    );
    let mut client =
        Connection::connect_with_timeout(bus.address(), quickbus_e2e::TIMEOUT).expect("connect");
    client.get_id().expect("the bus answers");
    // The kernel doubles what is asked for its bookkeeping.
    let doubled = 2 * asked;
    let buffers = socket_buffers_of(bus.pid());
    assert!(
        buffers.contains(&(doubled, doubled)),
        "no connection of the daemon with rb = tb = {doubled}: {buffers:?}"
    );
}

#[test]
fn without_the_limit_connections_keep_the_kernel_default() {
    if skip::quickbus_only("the socket_buffer_bytes limit") {
        return;
    }
    let bus = Bus::start_with_config(
        Listen::UnixPath,
        r#"<limit name="socket_buffer_bytes">0</limit>"#,
    );
    let mut client =
        Connection::connect_with_timeout(bus.address(), quickbus_e2e::TIMEOUT).expect("connect");
    client.get_id().expect("the bus answers");
    let default = std::fs::read_to_string("/proc/sys/net/core/wmem_default")
        .expect("wmem_default")
        .trim()
        .parse::<u64>()
        .expect("a number");
    let buffers = socket_buffers_of(bus.pid());
    assert!(
        !buffers.is_empty() && buffers.iter().all(|&(_, tb)| tb == default),
        "expected every socket at the default {default}: {buffers:?}"
    );
}

#[test]
fn a_socket_buffer_size_that_is_not_a_number_is_refused() {
    if skip::quickbus_only("the socket_buffer_bytes limit") {
        return;
    }
    let dir = quickbus_e2e::TempDir::new();
    let config = quickbus_e2e::write_config_with(
        dir.path(),
        Listen::UnixPath,
        r#"<limit name="socket_buffer_bytes">lots</limit>"#,
    );
    let out = run_bounded(
        Command::new(quickbus_e2e::daemon_path())
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .arg("--print-address"),
    )
    .failure();
    assert!(out.stderr.contains("socket_buffer_bytes"), "{out:#?}");
}
