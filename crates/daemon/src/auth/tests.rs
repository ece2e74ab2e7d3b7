use super::*;
use sha1::{Digest, Sha1};

const GUID: &str = "0123456789abcdef0123456789abcdef";
const UID: u32 = 1000;
/// hex("1000")
const UID_HEX: &str = "31303030";
const OK: &str = "OK 0123456789abcdef0123456789abcdef\r\n";
const REJECTED_EXTERNAL: &str = "REJECTED EXTERNAL\r\n";

fn config() -> AuthConfig {
    AuthConfig::new(GUID)
}

fn anonymous_config() -> AuthConfig {
    AuthConfig {
        allow_anonymous: true,
        ..config()
    }
}

/// A server that already got its credentials nul byte.
fn started(cfg: &AuthConfig) -> SaslServer {
    let mut server = SaslServer::new(cfg, Some(UID));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"\0", &mut out),
        Ok(AuthProgress::NeedMore { consumed: 1 })
    );
    assert!(out.is_empty());
    server
}

/// Feed `input` (whole lines) and return the replies; all must be consumed.
fn exchange(server: &mut SaslServer, input: &str) -> String {
    let mut out = Vec::new();
    let progress = server.feed(input.as_bytes(), &mut out).unwrap();
    assert_eq!(
        progress,
        AuthProgress::NeedMore {
            consumed: input.len()
        }
    );
    String::from_utf8(out).unwrap()
}

/// Feed `input` and expect the connection to be dropped for `error`.
fn expect_error(server: &mut SaslServer, input: &str, error: AuthError) {
    let mut out = Vec::new();
    assert_eq!(server.feed(input.as_bytes(), &mut out), Err(error));
}

/// What the server says to a whole stream, and how it ends, when the
/// stream arrives in the given pieces: like the daemon, keep what was not
/// consumed and feed it again in front of the next piece.
fn run_in_pieces(
    cfg: &AuthConfig,
    pieces: &[&[u8]],
) -> (Vec<u8>, Result<AuthProgress, AuthError>, usize, SaslServer) {
    let mut server = SaslServer::new(cfg, Some(UID));
    let mut buffer = Vec::new();
    let mut out = Vec::new();
    let mut total_consumed = 0;
    let mut last = Ok(AuthProgress::NeedMore { consumed: 0 });
    for piece in pieces {
        buffer.extend_from_slice(piece);
        last = server.feed(&buffer, &mut out);
        match last {
            Ok(AuthProgress::NeedMore { consumed }) => {
                buffer.drain(..consumed);
                total_consumed += consumed;
            }
            Ok(AuthProgress::Begin { consumed }) => {
                total_consumed += consumed;
                break;
            }
            Err(_) => break,
        }
    }
    (out, last, total_consumed, server)
}

fn pipelined_auth() -> String {
    format!("\0AUTH EXTERNAL {UID_HEX}\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n")
}

/// The start of a Hello method call: what follows BEGIN in real clients.
const FIRST_MESSAGE: &[u8] = b"l\x01\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00m\x00\x00\x00";

#[test]
fn pipelined_auth_begin_and_message_consumes_exactly_the_auth_lines() {
    let auth = pipelined_auth();
    let mut input = auth.clone().into_bytes();
    input.extend_from_slice(FIRST_MESSAGE);
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    let progress = server.feed(&input, &mut out).unwrap();
    assert_eq!(
        progress,
        AuthProgress::Begin {
            consumed: auth.len()
        }
    );
    assert_eq!(&input[auth.len()..], FIRST_MESSAGE);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{OK}AGREE_UNIX_FD\r\n")
    );
    assert!(server.unix_fd_negotiated());
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(UID)));
}

#[test]
fn message_bytes_that_look_like_commands_are_not_consumed() {
    let auth = pipelined_auth();
    let input = format!("{auth}BEGIN\r\nAUTH\r\n");
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(input.as_bytes(), &mut out),
        Ok(AuthProgress::Begin {
            consumed: auth.len()
        })
    );
}

#[test]
fn byte_at_a_time_gives_the_same_replies_and_consumption() {
    let auth = pipelined_auth();
    let mut input = auth.clone().into_bytes();
    input.extend_from_slice(FIRST_MESSAGE);
    let pieces: Vec<&[u8]> = input.chunks(1).collect();
    let (out, last, consumed, server) = run_in_pieces(&config(), &pieces);
    assert_eq!(
        last,
        Ok(AuthProgress::Begin {
            consumed: 2 + "BEGIN".len()
        })
    );
    assert_eq!(consumed, auth.len());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{OK}AGREE_UNIX_FD\r\n")
    );
    assert!(server.unix_fd_negotiated());
}

#[test]
fn every_two_piece_split_gives_the_same_result() {
    let auth = pipelined_auth();
    let mut input = auth.clone().into_bytes();
    input.extend_from_slice(FIRST_MESSAGE);
    for split in 0..=input.len() {
        let (head, tail) = input.split_at(split);
        let (out, last, consumed, _) = run_in_pieces(&config(), &[head, tail]);
        assert!(
            matches!(last, Ok(AuthProgress::Begin { .. })),
            "split {split}: {last:?}"
        );
        assert_eq!(consumed, auth.len(), "split {split}");
        assert_eq!(out, format!("{OK}AGREE_UNIX_FD\r\n").as_bytes());
    }
}

#[test]
fn a_partial_line_is_left_unconsumed() {
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"\0AUTH EXTERNAL 3130\r", &mut out),
        Ok(AuthProgress::NeedMore { consumed: 1 })
    );
    assert!(out.is_empty());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL 31303030\r\n"), OK);
}

#[test]
fn feeding_after_begin_consumes_nothing() {
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    server.feed(pipelined_auth().as_bytes(), &mut out).unwrap();
    out.clear();
    assert_eq!(
        server.feed(b"BEGIN\r\n", &mut out),
        Ok(AuthProgress::Begin { consumed: 0 })
    );
    assert!(out.is_empty());
}

#[test]
fn external_without_fd_negotiation() {
    let mut server = started(&config());
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert!(!server.unix_fd_negotiated());
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"BEGIN\r\n", &mut out),
        Ok(AuthProgress::Begin { consumed: 7 })
    );
    assert!(out.is_empty(), "BEGIN gets no reply");
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(UID)));
}

#[test]
fn external_with_the_wrong_uid_is_rejected_then_can_retry() {
    let mut server = started(&config());
    // hex("0"): root, but the socket says 1000.
    assert_eq!(
        exchange(&mut server, "AUTH EXTERNAL 30\r\n"),
        REJECTED_EXTERNAL
    );
    assert_eq!(server.authenticated(), None);
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
}

#[test]
fn external_refuses_identities_that_are_not_numbers_or_not_the_peers_uid() {
    // "root", "1000 ", "4294967295", "99999999999", "1000\0", "0x", "-1000"
    for hex in [
        "726f6f74",
        "3130303020",
        "34323934393637323935",
        "3939393939393939393939",
        "3130303000",
        "3078",
        "2d31303030",
    ] {
        let mut server = SaslServer::new(&config(), Some(UID));
        let line = format!("\0AUTH EXTERNAL {hex}\r\n");
        assert_eq!(exchange(&mut server, &line), REJECTED_EXTERNAL, "{hex}");
    }
}

#[test]
fn external_reads_the_uid_as_libdbus_strtoul_does() {
    // "+1000", " 1000", "\t1000", "0x3e8", "01750", "0001000" is octal
    // 512: refused.
    for (hex, ok) in [
        ("2b31303030", true),
        ("2031303030", true),
        ("0931303030", true),
        ("3078336538", true),
        ("3031373530", true),
        ("30303031303030", false),
    ] {
        let mut server = SaslServer::new(&config(), Some(UID));
        let line = format!("\0AUTH EXTERNAL {hex}\r\n");
        let expected = if ok { OK } else { REJECTED_EXTERNAL };
        assert_eq!(exchange(&mut server, &line), expected, "{hex}");
    }
}

#[test]
fn an_odd_length_initial_response_ends_in_a_high_half_byte_as_in_libdbus() {
    // "3" is the byte '0': uid 0, which a root peer is.
    let mut server = SaslServer::new(&config(), Some(0));
    assert_eq!(exchange(&mut server, "\0AUTH EXTERNAL 3\r\n"), OK);
    let mut server = SaslServer::new(&config(), Some(0));
    assert_eq!(
        exchange(&mut server, "\0AUTH EXTERNAL\r\nDATA 3\r\n"),
        format!("DATA\r\n{OK}")
    );
}

#[test]
fn anonymous_with_a_nul_in_the_trace_is_rejected() {
    let mut server = started(&anonymous_config());
    assert_eq!(
        exchange(&mut server, "AUTH ANONYMOUS 6100\r\n"),
        "REJECTED EXTERNAL ANONYMOUS\r\n"
    );
}

#[test]
fn external_accepts_uid_zero_for_root_peers() {
    let mut server = SaslServer::new(&config(), Some(0));
    assert_eq!(exchange(&mut server, "\0AUTH EXTERNAL 30\r\n"), OK);
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(0)));
}

#[test]
fn tabs_separate_words_too() {
    let mut server = started(&config());
    let line = format!("AUTH\tEXTERNAL \t{UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
}

#[test]
fn upper_case_hex_is_accepted() {
    let mut server = started(&anonymous_config());
    // "\u{e9}" in UTF-8: valid only if both digits pairs decode right.
    assert_eq!(exchange(&mut server, "AUTH ANONYMOUS C3A9\r\n"), OK);
}

#[test]
fn external_without_initial_response_then_empty_data_uses_socket_uid() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(server.authenticated(), None);
    assert_eq!(exchange(&mut server, "DATA\r\n"), OK);
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(UID)));
}

#[test]
fn external_without_initial_response_then_data_with_uid() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    let line = format!("DATA {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(UID)));
}

#[test]
fn external_data_with_the_wrong_uid_is_rejected() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(exchange(&mut server, "DATA 30\r\n"), REJECTED_EXTERNAL);
    // Back to waiting for AUTH: DATA is now out of place.
    assert_eq!(
        exchange(&mut server, "DATA\r\n"),
        "ERROR \"Not currently in an auth conversation\"\r\n"
    );
}

#[test]
fn while_waiting_for_data() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(
        exchange(&mut server, "AUTH EXTERNAL\r\n"),
        "ERROR \"Sent AUTH while another AUTH in progress\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "NEGOTIATE_UNIX_FD\r\n"),
        "ERROR \"Need to authenticate first\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "DATA 3z\r\n"),
        "ERROR \"Invalid hex encoding\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "WHAT\r\n"),
        "ERROR \"Unknown command\"\r\n"
    );
    // Still waiting for the data after all those errors.
    assert_eq!(exchange(&mut server, "DATA\r\n"), OK);
}

#[test]
fn cancel_while_waiting_for_data_rejects() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(exchange(&mut server, "CANCEL\r\n"), REJECTED_EXTERNAL);
    assert_eq!(
        exchange(&mut server, "AUTH EXTERNAL 30\r\n"),
        REJECTED_EXTERNAL
    );
}

#[test]
fn error_while_waiting_for_data_rejects() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(
        exchange(&mut server, "ERROR \"no idea\"\r\n"),
        REJECTED_EXTERNAL
    );
}

#[test]
fn cancel_while_waiting_for_auth_is_an_error() {
    let mut server = started(&config());
    assert_eq!(
        exchange(&mut server, "CANCEL\r\n"),
        "ERROR \"Not currently in an auth conversation\"\r\n"
    );
}

#[test]
fn cancel_after_ok_revokes_the_authentication() {
    let mut server = started(&config());
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert_eq!(exchange(&mut server, "CANCEL\r\n"), REJECTED_EXTERNAL);
    assert_eq!(server.authenticated(), None);
    expect_error(&mut server, "BEGIN\r\n", AuthError::BeginBeforeOk);
}

#[test]
fn error_after_ok_revokes_the_authentication() {
    let mut server = started(&config());
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert_eq!(exchange(&mut server, "ERROR\r\n"), REJECTED_EXTERNAL);
    assert_eq!(server.authenticated(), None);
}

#[test]
fn while_waiting_for_begin() {
    let mut server = started(&config());
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert_eq!(
        exchange(&mut server, &line),
        "ERROR \"Sent AUTH while expecting BEGIN\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "DATA\r\n"),
        "ERROR \"Sent DATA while expecting BEGIN\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "OK\r\n"),
        "ERROR \"Unknown command\"\r\n"
    );
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(UID)));
}

#[test]
fn auth_without_mechanism_lists_mechanisms() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH\r\n"), REJECTED_EXTERNAL);
    let mut server = started(&anonymous_config());
    assert_eq!(
        exchange(&mut server, "AUTH\r\n"),
        "REJECTED EXTERNAL ANONYMOUS\r\n"
    );
}

#[test]
fn anonymous_allowed() {
    let mut server = started(&anonymous_config());
    assert_eq!(exchange(&mut server, "AUTH ANONYMOUS\r\n"), OK);
    assert_eq!(server.authenticated(), Some(AuthIdentity::Anonymous));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"BEGIN\r\n", &mut out),
        Ok(AuthProgress::Begin { consumed: 7 })
    );
}

#[test]
fn anonymous_with_a_trace_string() {
    let mut server = started(&anonymous_config());
    // hex("libdbus 1.14")
    assert_eq!(
        exchange(&mut server, "AUTH ANONYMOUS 6c69626462757320312e3134\r\n"),
        OK
    );
    assert_eq!(server.authenticated(), Some(AuthIdentity::Anonymous));
}

#[test]
fn anonymous_with_a_trace_that_is_not_utf8_is_rejected() {
    let mut server = started(&anonymous_config());
    assert_eq!(
        exchange(&mut server, "AUTH ANONYMOUS ff\r\n"),
        "REJECTED EXTERNAL ANONYMOUS\r\n"
    );
    assert_eq!(server.authenticated(), None);
}

#[test]
fn anonymous_refused_without_allow_anonymous() {
    let mut server = started(&config());
    assert_eq!(
        exchange(&mut server, "AUTH ANONYMOUS\r\n"),
        REJECTED_EXTERNAL
    );
    assert_eq!(server.authenticated(), None);
}

#[test]
fn anonymous_refused_when_auth_elements_leave_it_out() {
    let cfg = AuthConfig::from_config(["EXTERNAL"], true, GUID);
    let mut server = started(&cfg);
    assert_eq!(
        exchange(&mut server, "AUTH ANONYMOUS\r\n"),
        REJECTED_EXTERNAL
    );
}

#[test]
fn external_refused_when_auth_elements_leave_it_out() {
    let cfg = AuthConfig::from_config(["ANONYMOUS"], true, GUID);
    let mut server = started(&cfg);
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), "REJECTED ANONYMOUS\r\n");
    assert_eq!(exchange(&mut server, "AUTH ANONYMOUS\r\n"), OK);
}

#[test]
fn from_config_reads_auth_element_names() {
    let all = AuthConfig::from_config(Vec::<String>::new(), false, GUID);
    assert_eq!(all.mechanisms, Mechanism::ALL.to_vec());
    assert!(!all.allow_anonymous);
    assert!(all.unix_fd_supported);
    assert_eq!(all.guid, GUID);

    let names = vec![
        "DBUS_COOKIE_SHA1".to_string(),
        "EXTERNAL".into(),
        "EXTERNAL".into(),
    ];
    let listed = AuthConfig::from_config(&names, true, GUID);
    assert_eq!(
        listed.mechanisms,
        vec![Mechanism::CookieSha1, Mechanism::External]
    );
    assert!(listed.allow_anonymous);
    let external = AuthConfig::from_config(["EXTERNAL"], false, GUID);
    assert!(
        external.keyring.is_none(),
        "no keyring unless the cookie is listed"
    );
}

#[test]
fn auth_elements_naming_a_mechanism_we_lack_are_refused_in_dbus_daemons_words() {
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(check_mechanism_names(&[]), Ok(()));
    assert_eq!(
        check_mechanism_names(&names(&["ANONYMOUS", "EXTERNAL", "DBUS_COOKIE_SHA1"])),
        Ok(())
    );
    assert_eq!(
        check_mechanism_names(&names(&["EXTERNAL", "KERBEROS_V4", "FOO"])),
        Err(
            "Unsupported auth mechanism \"KERBEROS_V4\" in bus config file detected. \
             Supported mechanisms are \"EXTERNAL, DBUS_COOKIE_SHA1, ANONYMOUS\"."
                .to_owned()
        )
    );
}

#[test]
fn unknown_and_unsupported_mechanisms_are_rejected() {
    let mut server = started(&anonymous_config());
    for line in [
        "AUTH DBUS_COOKIE_SHA1 75736572\r\n",
        "AUTH KERBEROS_V4\r\n",
        "AUTH external 31303030\r\n",
    ] {
        assert_eq!(
            exchange(&mut server, line),
            "REJECTED EXTERNAL ANONYMOUS\r\n",
            "{line}"
        );
    }
}

#[test]
fn bad_hex_in_initial_response_is_an_error_not_a_rejection() {
    let mut server = started(&config());
    for _ in 0..MAX_FAILURES + 1 {
        assert_eq!(
            exchange(&mut server, "AUTH EXTERNAL 31zz\r\n"),
            "ERROR \"Invalid hex encoding\"\r\n"
        );
    }
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
}

#[test]
fn garbage_and_unknown_commands_get_errors_and_are_not_fatal() {
    let mut server = started(&config());
    for line in [
        "FOOBAR\r\n",
        "\r\n",
        "auth EXTERNAL\r\n",
        "EXTENSION_X 1\r\n",
        "REJECTED\r\n",
        "AGREE_UNIX_FD\r\n",
    ] {
        assert_eq!(
            exchange(&mut server, line),
            "ERROR \"Unknown command\"\r\n",
            "{line:?}"
        );
    }
    assert_eq!(
        exchange(&mut server, "AUTH \u{e9}\r\n"),
        "ERROR \"Command contained non-ASCII\"\r\n"
    );
    assert_eq!(
        exchange(&mut server, "AUTH\0EXTERNAL\r\n"),
        "ERROR \"Command contained non-ASCII\"\r\n"
    );
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
}

#[test]
fn error_from_the_client_while_waiting_for_auth_rejects() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "ERROR\r\n"), REJECTED_EXTERNAL);
}

#[test]
fn missing_nul_byte_is_fatal() {
    let mut server = SaslServer::new(&config(), Some(UID));
    expect_error(
        &mut server,
        "AUTH EXTERNAL 31303030\r\n",
        AuthError::MissingNulByte(b'A'),
    );
}

#[test]
fn nothing_fed_waits_for_the_nul_byte() {
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"", &mut out),
        Ok(AuthProgress::NeedMore { consumed: 0 })
    );
    assert_eq!(
        server.feed(b"\0", &mut out),
        Ok(AuthProgress::NeedMore { consumed: 1 })
    );
    // A second nul is not the credentials byte: it is a bad line.
    assert_eq!(
        exchange(&mut server, "\0\r\n"),
        "ERROR \"Command contained non-ASCII\"\r\n"
    );
}

#[test]
fn overlong_unterminated_line_is_fatal() {
    let mut server = started(&config());
    let mut out = Vec::new();
    let too_long = vec![b'A'; MAX_LINE_LEN];
    assert_eq!(
        server.feed(&too_long, &mut out),
        Err(AuthError::LineTooLong)
    );
}

#[test]
fn a_line_that_can_still_fit_is_awaited() {
    let mut server = started(&config());
    let mut out = Vec::new();
    let mut line = vec![b'A'; MAX_LINE_LEN - 2];
    line.push(b'\r');
    assert_eq!(
        server.feed(&line, &mut out),
        Ok(AuthProgress::NeedMore { consumed: 0 })
    );
    line.push(b'\n');
    assert_eq!(
        server.feed(&line, &mut out),
        Ok(AuthProgress::NeedMore {
            consumed: MAX_LINE_LEN
        })
    );
    assert_eq!(out, b"ERROR \"Unknown command\"\r\n");
}

#[test]
fn overlong_terminated_line_is_fatal() {
    let mut server = started(&config());
    let line = format!("{}\r\n", "A".repeat(MAX_LINE_LEN - 1));
    expect_error(&mut server, &line, AuthError::LineTooLong);
}

#[test]
fn longest_allowed_line_is_handled() {
    let mut server = started(&config());
    let line = format!("{}\r\n", "A".repeat(MAX_LINE_LEN - 2));
    assert_eq!(
        exchange(&mut server, &line),
        "ERROR \"Unknown command\"\r\n"
    );
}

#[test]
fn long_message_after_begin_is_not_a_long_line() {
    let mut input = pipelined_auth().into_bytes();
    let auth_len = input.len();
    input.extend_from_slice(&vec![b'x'; 4 * MAX_LINE_LEN]);
    let mut server = SaslServer::new(&config(), Some(UID));
    let mut out = Vec::new();
    assert_eq!(
        server.feed(&input, &mut out),
        Ok(AuthProgress::Begin { consumed: auth_len })
    );
}

#[test]
fn negotiate_unix_fd_agreed_when_supported() {
    let mut server = started(&config());
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    assert_eq!(
        exchange(&mut server, "NEGOTIATE_UNIX_FD\r\n"),
        "AGREE_UNIX_FD\r\n"
    );
    assert!(server.unix_fd_negotiated());
}

#[test]
fn negotiate_unix_fd_refused_when_not_supported() {
    let cfg = AuthConfig {
        unix_fd_supported: false,
        ..config()
    };
    let mut server = started(&cfg);
    let input = format!("AUTH EXTERNAL {UID_HEX}\r\nNEGOTIATE_UNIX_FD\r\n");
    let out = exchange(&mut server, &input);
    assert!(out.starts_with(OK), "{out}");
    assert!(out[OK.len()..].starts_with("ERROR "), "{out}");
    assert!(!server.unix_fd_negotiated());
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"BEGIN\r\n", &mut out),
        Ok(AuthProgress::Begin { consumed: 7 })
    );
    assert!(!server.unix_fd_negotiated());
}

#[test]
fn negotiate_unix_fd_before_auth_is_an_error() {
    let mut server = started(&config());
    assert_eq!(
        exchange(&mut server, "NEGOTIATE_UNIX_FD\r\n"),
        "ERROR \"Need to authenticate first\"\r\n"
    );
    assert!(!server.unix_fd_negotiated());
}

#[test]
fn begin_before_auth_is_fatal() {
    let mut server = started(&config());
    expect_error(&mut server, "BEGIN\r\n", AuthError::BeginBeforeOk);
}

#[test]
fn begin_while_waiting_for_data_is_fatal() {
    let mut server = started(&config());
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    expect_error(&mut server, "BEGIN\r\n", AuthError::BeginBeforeOk);
}

#[test]
fn begin_after_rejection_is_fatal() {
    let mut server = SaslServer::new(&config(), Some(UID));
    expect_error(
        &mut server,
        "\0AUTH EXTERNAL 30\r\nBEGIN\r\n",
        AuthError::BeginBeforeOk,
    );
}

#[test]
fn the_sixth_rejection_is_fatal() {
    let mut server = started(&config());
    for _ in 1..MAX_FAILURES {
        assert_eq!(exchange(&mut server, "AUTH\r\n"), REJECTED_EXTERNAL);
    }
    // The sixth REJECTED is still said, as dbus-daemon says it, before the
    // connection is dropped.
    let mut out = Vec::new();
    assert_eq!(
        server.feed(b"AUTH EXTERNAL 30\r\n", &mut out),
        Err(AuthError::TooManyFailures)
    );
    assert_eq!(out, REJECTED_EXTERNAL.as_bytes());
}

#[test]
fn every_kind_of_rejection_counts_towards_the_limit() {
    let mut server = started(&anonymous_config());
    let rejections = [
        "AUTH\r\n",
        "AUTH EXTERNAL 30\r\n",
        "AUTH FOO\r\n",
        "ERROR\r\n",
        "AUTH ANONYMOUS ff\r\n",
    ];
    for line in rejections {
        assert!(
            exchange(&mut server, line).starts_with("REJECTED"),
            "{line}"
        );
    }
    assert_eq!(MAX_FAILURES as usize, rejections.len() + 1);
    let line = format!("AUTH EXTERNAL {UID_HEX}\r\n");
    assert_eq!(exchange(&mut server, &line), OK);
    expect_error(&mut server, "CANCEL\r\n", AuthError::TooManyFailures);
}

#[test]
fn too_many_lines_are_fatal() {
    let mut server = started(&config());
    let lines = "X\r\n".repeat(MAX_AUTH_LINES as usize);
    let out = exchange(&mut server, &lines);
    assert_eq!(out.matches("ERROR").count(), MAX_AUTH_LINES as usize);
    expect_error(&mut server, "X\r\n", AuthError::TooManyLines);
}

/// The counts a restart hands over at their top (a corrupt state): the
/// next line or rejection ends the exchange instead of overflowing.
#[test]
fn handed_over_counts_at_their_top_end_the_exchange() {
    let mut server = started(&config());
    server.lines = u32::MAX;
    expect_error(&mut server, "X\r\n", AuthError::TooManyLines);
    let mut server = started(&config());
    server.failures = u32::MAX;
    expect_error(&mut server, "AUTH NONSENSE\r\n", AuthError::TooManyFailures);
}

#[test]
fn errors_say_why() {
    assert_eq!(
        AuthError::MissingNulByte(b'A').to_string(),
        "first byte was 0x41, not the credentials nul byte"
    );
    assert_eq!(AuthError::TooManyFailures.to_string(), "rejected 6 times");
}

#[test]
fn mechanism_names_round_trip() {
    for m in Mechanism::ALL {
        assert_eq!(Mechanism::from_name(m.name()), Some(m));
    }
    assert_eq!(Mechanism::from_name("KERBEROS_V4"), None);
}

/// xorshift64: deterministic pseudo-random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random conversation built from pieces that reach every state.
fn random_stream(rng: &mut Rng) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"AUTH EXTERNAL 31303030\r\n",
        b"AUTH EXTERNAL 30\r\n",
        b"AUTH EXTERNAL\r\n",
        b"AUTH ANONYMOUS\r\n",
        b"AUTH ANONYMOUS ff\r\n",
        b"AUTH\r\n",
        b"DATA\r\n",
        b"DATA 31303030\r\n",
        b"DATA 3x\r\n",
        b"CANCEL\r\n",
        b"ERROR\r\n",
        b"NEGOTIATE_UNIX_FD\r\n",
        b"BEGIN\r\n",
        b"FOO\r\n",
        b"\r\n",
        b"\r",
        b"\n",
        b"\0",
        b"\xff",
        b"l\x01\x00\x01",
    ];
    let mut stream = vec![0];
    for _ in 0..rng.below(12) {
        stream.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
    stream
}

/// Run `stream` through a server in the given pieces; return the replies
/// and the outcome with the total consumed for Begin.
fn outcome_in_pieces(stream: &[u8], cuts: &[usize]) -> (Vec<u8>, Result<Option<usize>, AuthError>) {
    let cfg = anonymous_config();
    let mut pieces = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        pieces.push(&stream[start..cut]);
        start = cut;
    }
    pieces.push(&stream[start..]);
    let (out, last, consumed, _) = run_in_pieces(&cfg, &pieces);
    let outcome = match last {
        Ok(AuthProgress::Begin { .. }) => Ok(Some(consumed)),
        Ok(AuthProgress::NeedMore { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    (out, outcome)
}

#[test]
fn how_input_is_split_never_changes_the_conversation() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut begun, mut failed) = (0, 0);
    for _ in 0..2000 {
        let stream = random_stream(&mut rng);
        let whole = outcome_in_pieces(&stream, &[]);
        let mut cuts: Vec<usize> = (0..rng.below(6))
            .map(|_| rng.below(stream.len() + 1))
            .collect();
        cuts.sort_unstable();
        let split = outcome_in_pieces(&stream, &cuts);
        assert_eq!(whole, split, "stream {stream:?} cut at {cuts:?}");
        match whole.1 {
            Ok(Some(consumed)) => {
                assert!(stream[..consumed].ends_with(b"BEGIN\r\n"));
                begun += 1;
            }
            Err(_) => failed += 1,
            Ok(None) => {}
        }
    }
    // The streams do reach both ends of the conversation.
    assert!(begun > 20 && failed > 20, "{begun} begun, {failed} failed");
}

#[test]
fn external_fails_without_a_kernel_uid_as_over_tcp() {
    let cfg = AuthConfig {
        unix_fd_supported: false,
        ..anonymous_config()
    };
    let mut server = SaslServer::new(&cfg, None);
    let mut out = Vec::new();
    server.feed(b"\0", &mut out).unwrap();
    let rejected = "REJECTED EXTERNAL ANONYMOUS\r\n";
    assert_eq!(
        exchange(&mut server, &format!("AUTH EXTERNAL {UID_HEX}\r\n")),
        rejected
    );
    assert_eq!(exchange(&mut server, "AUTH EXTERNAL\r\n"), "DATA\r\n");
    assert_eq!(exchange(&mut server, "DATA\r\n"), rejected);
    assert_eq!(exchange(&mut server, "AUTH ANONYMOUS\r\n"), OK);
    assert_eq!(
        exchange(&mut server, "NEGOTIATE_UNIX_FD\r\n"),
        "ERROR \"Unix FD passing not supported, not authenticated or otherwise not possible\"\r\n"
    );
    assert_eq!(server.authenticated(), Some(AuthIdentity::Anonymous));
}

/// A configuration offering DBUS_COOKIE_SHA1 from a keyring in a scratch
/// home, and that home.
fn cookie_config(name: &str) -> (AuthConfig, std::path::PathBuf) {
    let home = std::env::temp_dir().join(format!("qb-auth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let uid = rustix::process::geteuid().as_raw();
    let cfg = AuthConfig {
        keyring: Some(Keyring::new(&home, uid)),
        ..config()
    };
    (cfg, home)
}

fn hex_of(text: &str) -> String {
    keyring::hex(text.as_bytes())
}

/// The server's DATA challenge, decoded: (context, cookie id, challenge).
fn cookie_challenge(reply: &str) -> (String, u32, String) {
    let hex = reply
        .strip_prefix("DATA ")
        .and_then(|r| r.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("not a DATA line: {reply:?}"));
    let text = String::from_utf8(command::decode_hex(hex).unwrap()).unwrap();
    let words: Vec<&str> = text.split(' ').collect();
    assert_eq!(words.len(), 3, "{text}");
    (words[0].into(), words[1].parse().unwrap(), words[2].into())
}

#[test]
fn cookie_sha1_proves_the_daemons_own_user() {
    let (cfg, home) = cookie_config("cookie");
    let uid = rustix::process::geteuid().as_raw();
    let mut server = started(&cfg);
    let reply = exchange(
        &mut server,
        &format!("AUTH DBUS_COOKIE_SHA1 {}\r\n", hex_of(&uid.to_string())),
    );
    let (context, id, challenge) = cookie_challenge(&reply);
    assert_eq!(context, "org_freedesktop_general");
    let cookie = Keyring::new(&home, uid)
        .get(id)
        .expect("the cookie is in the file");
    let hash = keyring::hex(&Sha1::digest(format!(
        "{challenge}:ourchallenge:{}",
        cookie.hex
    )));
    let answer = hex_of(&format!("ourchallenge {hash}"));
    assert_eq!(exchange(&mut server, &format!("DATA {answer}\r\n")), OK);
    assert_eq!(server.authenticated(), Some(AuthIdentity::Uid(uid)));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn cookie_sha1_rejects_a_wrong_hash_another_user_and_no_identity() {
    let (cfg, home) = cookie_config("cookie-bad");
    let uid = rustix::process::geteuid().as_raw();
    let rejected = "REJECTED EXTERNAL DBUS_COOKIE_SHA1\r\n";
    let mut server = started(&cfg);
    let reply = exchange(
        &mut server,
        &format!("AUTH DBUS_COOKIE_SHA1 {}\r\n", hex_of(&uid.to_string())),
    );
    cookie_challenge(&reply);
    let wrong = hex_of(&format!("c {}", "0".repeat(40)));
    assert_eq!(
        exchange(&mut server, &format!("DATA {wrong}\r\n")),
        rejected
    );
    let other = hex_of(&uid.wrapping_add(1).to_string());
    assert_eq!(
        exchange(&mut server, &format!("AUTH DBUS_COOKIE_SHA1 {other}\r\n")),
        rejected
    );
    assert_eq!(exchange(&mut server, "AUTH DBUS_COOKIE_SHA1\r\n"), rejected);
    assert_eq!(server.authenticated(), None);
    // Without a keyring the mechanism is not offered at all.
    let mut plain = started(&config());
    assert_eq!(
        exchange(&mut plain, "AUTH DBUS_COOKIE_SHA1 30\r\n"),
        REJECTED_EXTERNAL
    );
    std::fs::remove_dir_all(&home).unwrap();
}
