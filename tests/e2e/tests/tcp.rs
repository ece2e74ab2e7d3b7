//! The tcp and nonce-tcp transports (issue 14), on 127.0.0.1 only:
//! dbus-daemon's listen addresses (port 0 picks a port the printed address
//! names; nonce-tcp writes a private nonce file and checks the nonce
//! before SASL), its authentication over tcp (EXTERNAL cannot work, so the
//! tests allow ANONYMOUS) and no peer credentials, with dbus-send, gdbus
//! and dbus-python as clients. Passes against
//! QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon too.

// Shared with observe.rs, which uses the rest of it.
#[allow(dead_code)]
#[path = "observe/support.rs"]
mod observe_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use quickbus_client::Connection;
use quickbus_e2e::{
    daemon_path, python_path, run_bounded, terminate_and_wait, testing_quickbus, Background, Bus,
    TempDir, TIMEOUT,
};
use quickbus_wire::address::{parse_addresses, AddressEntry};

/// A session bus listening on `listen`, ANONYMOUS allowed (quickbus's own
/// client authenticates with it over tcp).
fn start(listen: &str) -> Bus {
    start_with_auth(listen, "<auth>ANONYMOUS</auth>\n  <allow_anonymous/>")
}

/// A session bus listening on `listen` with `auth` (elements of the
/// configuration).
fn start_with_auth(listen: &str, auth: &str) -> Bus {
    let listen = listen.to_owned();
    let auth = auth.to_owned();
    Bus::start_configured(move |dir: &Path| {
        let config = format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>{listen}</listen>
  {auth}
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#
        );
        let path = dir.join("bus.conf");
        std::fs::write(&path, config).expect("write the configuration");
        path
    })
}

fn entry(bus: &Bus) -> AddressEntry {
    parse_addresses(bus.address()).expect("a valid address")[0].clone()
}

fn port_of(bus: &Bus) -> u16 {
    let port: u16 = entry(bus)
        .get("port")
        .expect("port=")
        .parse()
        .expect("a port");
    assert_ne!(port, 0, "port 0 must be replaced by the port picked");
    port
}

/// dbus-send, gdbus and dbus-python each call the driver over the bus's
/// address and get an answer.
fn assert_clients_work(bus: &Bus) {
    let id = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply=literal",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.GetId",
            ],
        )
        .success();
    let id = id.stdout.trim().to_owned();
    assert_eq!(id.len(), 32, "{id:?}");
    let gdbus = bus
        .run(
            "gdbus",
            &[
                "call",
                "--session",
                "--dest",
                "org.freedesktop.DBus",
                "--object-path",
                "/org/freedesktop/DBus",
                "--method",
                "org.freedesktop.DBus.GetId",
            ],
        )
        .success();
    assert_eq!(gdbus.stdout.trim(), format!("('{id}',)"));
    let script = "import dbus; bus = dbus.SessionBus(); \
                  print(bus.get_unique_name()); \
                  print(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus').GetId())";
    let python = run_bounded(bus.client(python_path()).args(["-c", script])).success();
    let lines: Vec<&str> = python.stdout.lines().collect();
    assert!(lines[0].starts_with(":1."), "{lines:?}");
    assert_eq!(lines[1], id);
}

#[test]
fn tcp_port_0_picks_a_port_the_printed_address_names() {
    let bus = start("tcp:host=127.0.0.1,port=0");
    let address = bus.address();
    assert!(address.starts_with("tcp:host=127.0.0.1,port="), "{address}");
    assert_eq!(entry(&bus).get("family"), Some("ipv4"), "{address}");
    TcpStream::connect(("127.0.0.1", port_of(&bus))).expect("connect to the printed port");
    assert_clients_work(&bus);
}

#[test]
fn tcp_bind_listens_where_it_says_and_prints_the_host() {
    // The printed host is `host`; the socket is bound to `bind`.
    let bus = start("tcp:host=localhost,bind=127.0.0.1,port=0,family=ipv4");
    let address = bus.address();
    assert!(address.starts_with("tcp:host=localhost,port="), "{address}");
    TcpStream::connect(("127.0.0.1", port_of(&bus))).expect("connect to 127.0.0.1");
    assert_clients_work(&bus);
}

#[test]
fn tcp_peers_have_no_unix_credentials() {
    let bus = start("tcp:host=127.0.0.1");
    let out = bus
        .run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.GetConnectionUnixUser",
                "string:org.freedesktop.DBus.Nobody",
            ],
        )
        .failure();
    assert!(out.stderr.contains("NameHasNoOwner"), "{out:#?}");
    // Its own connection: dbus-python asks about itself.
    let script = "import dbus; bus = dbus.SessionBus(); d = dbus.Interface(bus.get_object( \
                  'org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')\n\
                  for method in ('GetConnectionUnixUser', 'GetConnectionUnixProcessID'):\n\
                  \ttry:\n\
                  \t\tprint(getattr(d, method)(bus.get_unique_name()))\n\
                  \texcept dbus.DBusException as e:\n\
                  \t\tprint(e.get_dbus_name())\n\
                  print(dict(d.GetConnectionCredentials(bus.get_unique_name())))";
    let out = run_bounded(bus.client(python_path()).args(["-c", script])).success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "org.freedesktop.DBus.Error.Failed", "{out:#?}");
    if testing_quickbus() {
        // dbus-daemon reports pid 0 (what SO_PEERCRED says of a tcp
        // socket); quickbus reports no pid (docs/differences.md).
        assert_eq!(
            lines[1..],
            ["org.freedesktop.DBus.Error.UnixProcessIdUnknown", "{}"],
            "{out:#?}"
        );
    }
}

/// Reads one `\r\n`-terminated line, or None at end of stream.
fn read_line(stream: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(0) | Err(_) => return None,
            Ok(_) => line.push(byte[0]),
        }
    }
    Some(String::from_utf8_lossy(&line[..line.len() - 2]).into_owned())
}

fn raw_tcp(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream
}

#[test]
fn external_cannot_authenticate_over_tcp() {
    let bus = start("tcp:host=127.0.0.1");
    let mut stream = raw_tcp(port_of(&bus));
    let uid = rustix::process::getuid().as_raw().to_string();
    let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
    stream
        .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
        .expect("send AUTH");
    let reply = read_line(&mut stream).expect("an answer");
    assert!(reply.starts_with("REJECTED"), "{reply}");
    assert!(reply.contains("ANONYMOUS"), "{reply}");
    stream.write_all(b"AUTH ANONYMOUS\r\n").expect("send AUTH");
    let ok = read_line(&mut stream).expect("an answer");
    assert!(ok.starts_with("OK "), "{ok}");
    stream.write_all(b"NEGOTIATE_UNIX_FD\r\n").expect("send");
    let refused = read_line(&mut stream).expect("an answer");
    assert!(
        refused.starts_with("ERROR"),
        "no fd passing over tcp: {refused}"
    );
}

fn nonce_file(bus: &Bus) -> PathBuf {
    PathBuf::from(entry(bus).get("noncefile").expect("noncefile="))
}

#[test]
fn nonce_tcp_writes_a_private_nonce_file_and_serves_clients() {
    let bus = start("nonce-tcp:host=127.0.0.1,port=0");
    let address = bus.address();
    assert!(
        address.starts_with("nonce-tcp:host=127.0.0.1,port="),
        "{address}"
    );
    let file = nonce_file(&bus);
    let nonce = std::fs::read(&file).expect("read the nonce file");
    assert_eq!(nonce.len(), 16);
    use std::os::unix::fs::PermissionsExt;
    let dir = file.parent().expect("a directory");
    let mode = std::fs::metadata(dir).expect("stat").permissions().mode();
    assert_eq!(mode & 0o077, 0, "the nonce directory is private: {mode:o}");
    assert_clients_work(&bus);
    // The nonce, then SASL.
    let mut stream = raw_tcp(port_of(&bus));
    stream.write_all(&nonce).expect("send the nonce");
    stream
        .write_all(b"\0AUTH ANONYMOUS\r\n")
        .expect("send AUTH");
    let ok = read_line(&mut stream).expect("an answer");
    assert!(ok.starts_with("OK "), "{ok}");
}

#[test]
fn nonce_tcp_closes_a_connection_with_the_wrong_nonce() {
    let bus = start("nonce-tcp:host=127.0.0.1");
    let mut nonce = std::fs::read(nonce_file(&bus)).expect("read the nonce file");
    nonce[0] ^= 0xff;
    let mut stream = raw_tcp(port_of(&bus));
    stream.write_all(&nonce).expect("send a wrong nonce");
    let _ = stream.write_all(b"\0AUTH ANONYMOUS\r\n");
    assert_eq!(read_line(&mut stream), None, "no SASL answer, just the end");
    // A client without the nonce at all is refused too (libdbus reads the
    // file; without it, nothing to send).
    let mut silent = raw_tcp(port_of(&bus));
    let _ = silent.write_all(b"\0AUTH ANONYMOUS\r\n");
    let _ = silent.shutdown(std::net::Shutdown::Write);
    assert_eq!(read_line(&mut silent), None);
    assert_clients_work(&bus);
}

/// quickbus's own client and the `quickbus` tool reach the bus over the
/// printed address.
fn assert_quickbus_client_and_tool_work(bus: &Bus) {
    let mut conn = Connection::connect_with_timeout(bus.address(), TIMEOUT)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", bus.address()));
    assert!(conn.unique_name().starts_with(":1."));
    assert!(!conn.can_pass_fds(), "no fd passing over tcp");
    assert_eq!(conn.get_id().expect("GetId").len(), 32);
    let listed = run_bounded(std::process::Command::new(observe_support::tool()).args([
        "--address",
        bus.address(),
        "list",
    ]))
    .success();
    assert!(
        listed.stdout.contains("org.freedesktop.DBus"),
        "{listed:#?}"
    );
}

#[test]
fn quickbus_client_and_tool_connect_over_tcp_and_nonce_tcp() {
    for listen in ["tcp:host=127.0.0.1", "nonce-tcp:host=127.0.0.1"] {
        let bus = start(listen);
        assert_quickbus_client_and_tool_work(&bus);
    }
}

#[test]
fn dbus_cookie_sha1_is_what_clients_use_over_tcp_by_default() {
    // No <auth>: dbus-daemon offers EXTERNAL, DBUS_COOKIE_SHA1 (and
    // ANONYMOUS only with <allow_anonymous/>). The clients prove they can
    // read the keyring in ~/.dbus-keyrings of the user the bus runs as.
    for listen in ["tcp:host=127.0.0.1", "nonce-tcp:host=127.0.0.1"] {
        let bus = start_with_auth(listen, "");
        let mut stream = raw_tcp(port_of(&bus));
        if listen.starts_with("nonce") {
            let nonce = std::fs::read(nonce_file(&bus)).expect("read the nonce file");
            stream.write_all(&nonce).expect("send the nonce");
        }
        stream.write_all(b"\0AUTH\r\n").expect("send AUTH");
        let offered = read_line(&mut stream).expect("an answer");
        // (dbus-daemon lists ANONYMOUS too, then refuses it at BEGIN
        // without <allow_anonymous/>; quickbus does not offer it.)
        assert!(
            offered.starts_with("REJECTED EXTERNAL DBUS_COOKIE_SHA1"),
            "{listen}: {offered}"
        );
        assert_clients_work(&bus);
        assert_quickbus_client_and_tool_work(&bus);
        // The bus knows the peer as the user it proved to be.
        let uid = rustix::process::getuid().as_raw().to_string();
        let script = "import dbus; bus = dbus.SessionBus(); \
                      print(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus') \
                      .GetConnectionUnixUser(bus.get_unique_name()))";
        let out = run_bounded(bus.client(python_path()).args(["-c", script])).success();
        assert_eq!(out.stdout.trim(), uid, "{out:#?}");
    }
}

/// The fenced block of `language` that follows `marker` in `text`.
fn fenced_block_after<'a>(text: &'a str, marker: &str, language: &str) -> &'a str {
    let after = &text[text
        .find(marker)
        .unwrap_or_else(|| panic!("README.md has no {marker:?}"))..];
    let open = format!("```{language}\n");
    let start = after
        .find(&open)
        .unwrap_or_else(|| panic!("no {language} block after {marker:?}"))
        + open.len();
    let len = after[start..].find("```").expect("a closed block");
    &after[start..start + len]
}

/// The README's tcp example, its configuration and its `--address=` as
/// written there: the bus it starts serves clients over tcp (they
/// authenticate with DBUS_COOKIE_SHA1). And what the README says of
/// `--session` alone: its configuration offers EXTERNAL only, which no
/// client can use over tcp.
#[test]
fn the_readme_tcp_example_serves_clients() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let marker = "the_readme_tcp_example_serves_clients";
    let config = fenced_block_after(&readme, marker, "xml").to_owned();
    let command = fenced_block_after(&readme, marker, "sh");
    assert!(
        command.contains("--config-file=tcp-session.conf"),
        "{command}"
    );
    let address = command
        .split_once("--address='")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(address, _)| address.to_owned())
        .unwrap_or_else(|| panic!("no --address='...' in {command}"));

    let dir = TempDir::new();
    let path = dir.path().join("tcp-session.conf");
    std::fs::write(&path, config).expect("write the configuration");
    let bus = Bus::start_args(
        dir,
        &[
            format!("--config-file={}", path.display()),
            format!("--address={address}"),
        ],
    );
    assert!(bus.address().starts_with("tcp:"), "{}", bus.address());
    assert_clients_work(&bus);

    // `--session` alone: REJECTED EXTERNAL, nothing a tcp client can use.
    let mut session = Background::spawn(
        Command::new(daemon_path())
            .args(["--session", "--nofork", "--print-address"])
            .arg(format!("--address={address}")),
    );
    let printed = session.read_line();
    let port: u16 = parse_addresses(&printed).expect("an address")[0]
        .get("port")
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {printed}"));
    let mut stream = raw_tcp(port);
    stream.write_all(b"\0AUTH\r\n").expect("send AUTH");
    assert_eq!(read_line(&mut stream).as_deref(), Some("REJECTED EXTERNAL"));
    terminate_and_wait(session.pid());
}
