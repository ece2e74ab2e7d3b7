//! Loading whole configurations: elements, merging of includes, errors
//! with their lines, the built-in session file, and every real
//! configuration file installed on this machine.

use std::path::{Path, PathBuf};

use super::loader::Loader;
use super::*;

const HEADER: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">"#;

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("qb-config-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse(body: &str) -> Result<BusConfig, ConfigError> {
    parse_str(
        &format!("<busconfig>\n{body}\n</busconfig>\n"),
        "/etc/test/bus.conf",
    )
}

/// The error for `body`, placed from line 2 of /etc/test/bus.conf.
fn refused(body: &str) -> ConfigError {
    parse(body).expect_err("should be refused")
}

#[test]
fn every_element_is_read() {
    let config = parse_str(
        &format!(
            r#"<!-- leading comment -->
{HEADER}
<busconfig>
  <type>system</type>
  <user>messagebus</user>
  <fork/>
  <keep_umask/>
  <syslog/>
  <pidfile>/run/dbus/pid</pidfile>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <auth>ANONYMOUS</auth>
  <allow_anonymous/>
  <servicedir>/opt/services</servicedir>
  <servicedir>relative/services</servicedir>
  <servicedir>/opt/services</servicedir>
  <servicehelper>helper/activate</servicehelper>
  <limit name="max_match_rules_per_connection">   77 </limit>
  <policy context="default">
    <deny own="*"/>
    <allow send_destination="org.a" send_interface="org.a.I"/>
  </policy>
  <policy user="root"><allow own="*"/></policy>
  <policy group="wheel"/>
  <policy at_console="true"/>
  <policy context="mandatory"/>
  <selinux><associate own="org.a" context="a_t"/></selinux>
  <apparmor mode="enabled"/>
</busconfig>"#
        ),
        "/etc/dbus/system.conf",
    )
    .unwrap();
    assert_eq!(config.bus_type.as_deref(), Some("system"));
    assert_eq!(config.user.as_deref(), Some("messagebus"));
    assert!(config.fork && config.keep_umask && config.syslog && config.allow_anonymous);
    assert_eq!(config.pidfile, Some(PathBuf::from("/run/dbus/pid")));
    assert_eq!(
        config.listen,
        vec!["unix:path=/run/dbus/system_bus_socket", "unix:tmpdir=/tmp"]
    );
    assert_eq!(config.auth, vec!["EXTERNAL", "ANONYMOUS"]);
    assert_eq!(
        config.service_dirs(),
        &[
            PathBuf::from("/opt/services"),
            PathBuf::from("/etc/dbus/relative/services")
        ]
    );
    assert_eq!(
        config.servicehelper,
        Some(PathBuf::from("/etc/dbus/helper/activate"))
    );
    assert_eq!(config.limits.max_match_rules_per_connection, 77);
    assert_eq!(
        config.limits.auth_timeout_ms,
        Limits::default().auth_timeout_ms
    );
    let scopes: Vec<&PolicyScope> = config.policies.iter().map(|p| &p.scope).collect();
    assert_eq!(
        scopes,
        vec![
            &PolicyScope::Default,
            &PolicyScope::User("root".into()),
            &PolicyScope::Group("wheel".into()),
            &PolicyScope::AtConsole(true),
            &PolicyScope::Mandatory,
        ]
    );
    let default = &config.policies[0];
    assert_eq!(default.line, 21);
    assert_eq!(default.rules.len(), 2);
    assert!(!default.rules[0].allow);
    assert_eq!(default.rules[1].line, 23);
    assert_eq!(
        default.rules[1].attributes,
        vec![
            ("send_destination".to_owned(), "org.a".to_owned()),
            ("send_interface".to_owned(), "org.a.I".to_owned())
        ]
    );
    assert_eq!(
        default.rules[1].file,
        PathBuf::from("/etc/dbus/system.conf")
    );
    assert_eq!(
        config.selinux_associations,
        vec![("org.a".to_owned(), "a_t".to_owned())]
    );
    assert_eq!(config.apparmor.as_deref(), Some("enabled"));
    assert!(config.warnings.is_empty());
}

#[test]
fn errors_name_the_file_and_the_line_of_the_offending_element() {
    // The body starts on line 2.
    let cases: &[(&str, usize, &str)] = &[
        ("<listen>unix:tmpdir=/tmp</listen>\n<bees/>", 3, "element <bees> not allowed inside <busconfig>"),
        ("<listen carefully=\"yes\">unix:tmpdir=/tmp</listen>", 2, "attribute \"carefully\" is invalid on <listen>"),
        ("<listen>x</listen>\n\n<user></user>", 4, "<user> was expected to have content"),
        ("<listen>x</listen>\n<fork>now</fork>", 3, "no text content expected inside XML element <fork>"),
        ("<listen>x</listen>\n<fork a=\"b\"/>", 3, "attribute \"a\" is invalid on <fork>"),
        ("<listen>x<fork/></listen>", 2, "element <fork> is not allowed in this context"),
        ("<listen>x</listen>\n<limit>5</limit>", 3, "<limit> element must have a \"name\" attribute"),
        ("<listen>x</listen>\n<limit wildebeest=\"gnu\">5</limit>", 3, "attribute \"wildebeest\" is invalid on <limit>"),
        ("<listen>x</listen>\n<limit name=\"max_bees\">5</limit>", 3, "there is no limit called \"max_bees\""),
        ("<listen>x</listen>\n<limit name=\"auth_timeout\">bees</limit>", 3, "could not parse as integer"),
        ("<listen>x</listen>\n<limit name=\"auth_timeout\">-1</limit>", 3, "must be a positive number"),
        ("<listen>x</listen>\n<limit name=\"auth_timeout\">3123123123</limit>", 3, "value is too large"),
        ("<listen>x</listen>\n<policy/>", 3, "exactly one of (context|user|group|at_console)"),
        ("<listen>x</listen>\n<policy hat=\"top\"/>", 3, "attribute \"hat\" is invalid on <policy>"),
        ("<listen>x</listen>\n<policy context=\"apropos\"/>", 3, "must have the value \"default\" or \"mandatory\""),
        ("<listen>x</listen>\n<policy at_console=\"maybe\"/>", 3, "at_console"),
        ("<listen>x</listen>\n<policy context=\"default\">\n  <allow species=\"stoat\"/>\n</policy>", 4, "attribute \"species\" is invalid on <allow>"),
        ("<listen>x</listen>\n<policy context=\"default\">\n\n  <allow/>\n</policy>", 5, "must have one or more attributes"),
        ("<listen>x</listen>\n<policy context=\"default\">\n  <policy context=\"default\"/>\n</policy>", 4, "element <policy> not allowed inside <policy>"),
        ("<listen>x</listen>\n<policy context=\"default\">text</policy>", 3, "no text content expected"),
        ("<listen>x</listen>\n<policy context=\"default\">\n  <allow own=\"*\"><fork/></allow>\n</policy>", 4, "element <fork> is not allowed in this context"),
        ("<listen>x</listen>\n<allow own=\"*\"/>", 3, "element <allow> not allowed inside <busconfig>"),
        ("<listen>x</listen>\n<selinux>\n<bogus/></selinux>", 4, "element <bogus> not allowed inside <selinux>"),
        ("<listen>x</listen>\n<selinux><associate own=\"a\"/></selinux>", 3, "must have attributes own="),
        ("<listen>x</listen>\n<apparmor mode=\"plaintive\"/>", 3, "mode attribute on <apparmor>"),
        ("<listen>x</listen>\n<apparmor enforcement_style=\"Judge Dredd\"/>", 3, "attribute \"enforcement_style\" is invalid on <apparmor>"),
        ("<listen>x</listen>\n<include ignore_missing=\"maybe\">/x.conf</include>", 3, "ignore_missing attribute must have value \"yes\" or \"no\""),
        ("<listen>x</listen>\n<include if_selinux_enabled=\"moo\">/x.conf</include>", 3, "if_selinux_enabled attribute"),
        ("<listen>x</listen>\n<include selinux_root_relative=\"jomoma\">x</include>", 3, "selinux_root_relative attribute"),
        ("<listen>x</listen>\n<include selinux_root_relative=\"yes\">x</include>", 3, "SELinux policy root"),
        ("<listen>x</listen>\n<include>/nonexistent/quickbus.conf</include>", 3, "cannot include '/nonexistent/quickbus.conf'"),
        ("<listen>x</listen>\n<includedir ignore_missing=\"yes\">d</includedir>", 3, "attribute \"ignore_missing\" is invalid on <includedir>"),
        ("<listen>x</listen>\n<user>me</foo>", 3, "malformed XML"),
    ];
    for (body, line, reason) in cases {
        let err = refused(body);
        assert_eq!(err.file, PathBuf::from("/etc/test/bus.conf"), "{body}");
        assert_eq!(err.line, *line, "{body}: {err}");
        assert!(err.reason.contains(reason), "{body}: {err}");
        assert_eq!(
            err.to_string(),
            format!("/etc/test/bus.conf:{line}: {}", err.reason)
        );
    }
}

#[test]
fn the_root_must_be_busconfig_and_a_listen_address_is_required() {
    let err = parse_str("<foo/>", "/x.conf").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/x.conf:1: unknown element <foo> at root of configuration file"
    );
    let err = parse_str("<busconfig text=\"1\"/>", "/x.conf").unwrap_err();
    assert!(err.reason.contains("attribute \"text\""), "{err}");
    let err = parse("<auth>EXTERNAL</auth>").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/test/bus.conf: the configuration needs one or more <listen> elements giving addresses"
    );
}

#[test]
fn an_unreadable_file_is_named() {
    let err = load("/nonexistent/quickbus/bus.conf").unwrap_err();
    assert_eq!(err.line, 0);
    assert!(
        err.to_string()
            .starts_with("/nonexistent/quickbus/bus.conf: cannot read the file:"),
        "{err}"
    );
}

#[test]
fn includes_merge_as_in_dbus_daemon() {
    let dir = TempDir::new("merge");
    dir.write(
        "sub/extra.conf",
        r#"<busconfig>
  <type>system</type>
  <user>other</user>
  <pidfile>/run/other.pid</pidfile>
  <fork/>
  <listen>unix:path=/run/b</listen>
  <auth>ANONYMOUS</auth>
  <servicedir>services</servicedir>
  <limit name="auth_timeout">2</limit>
  <policy context="default"><allow own="b"/></policy>
</busconfig>"#,
    );
    let main = dir.write(
        "main.conf",
        r#"<busconfig>
  <type>session</type>
  <user>me</user>
  <pidfile>/run/me.pid</pidfile>
  <listen>unix:path=/run/a</listen>
  <auth>EXTERNAL</auth>
  <limit name="auth_timeout">1</limit>
  <limit name="max_names_per_connection">5</limit>
  <policy context="default"><allow own="a"/></policy>
  <include>sub/extra.conf</include>
  <include ignore_missing="yes">missing.conf</include>
  <include if_selinux_enabled="yes">also-missing.conf</include>
  <listen>unix:path=/run/c</listen>
  <policy context="default"><allow own="c"/></policy>
</busconfig>"#,
    );
    let config = load(&main).unwrap();
    // Single values: the last file to set them wins.
    assert_eq!(config.bus_type.as_deref(), Some("system"));
    assert_eq!(config.user.as_deref(), Some("other"));
    assert_eq!(config.pidfile, Some(PathBuf::from("/run/other.pid")));
    assert_eq!(config.limits.auth_timeout_ms, 2);
    assert_eq!(config.limits.max_names_per_connection, 5);
    assert!(config.fork);
    // Lists accumulate in document order.
    assert_eq!(
        config.listen,
        vec!["unix:path=/run/a", "unix:path=/run/b", "unix:path=/run/c"]
    );
    assert_eq!(config.auth, vec!["EXTERNAL", "ANONYMOUS"]);
    // Relative paths are relative to the file that holds them.
    assert_eq!(config.servicedirs, vec![dir.0.join("sub/services")]);
    let owned: Vec<&str> = config
        .policies
        .iter()
        .map(|p| p.rules[0].attribute("own").unwrap())
        .collect();
    assert_eq!(owned, vec!["a", "b", "c"]);
    assert_eq!(config.policies[1].file, dir.0.join("sub/extra.conf"));
    assert_eq!(config.files, vec![main, dir.0.join("sub/extra.conf")]);
}

#[test]
fn errors_in_included_files_name_the_included_file() {
    let dir = TempDir::new("nested-error");
    dir.write("bad.conf", "<busconfig>\n\n  <bees/>\n</busconfig>");
    let main = dir.write(
        "main.conf",
        "<busconfig>\n<listen>x</listen>\n<include>bad.conf</include>\n</busconfig>",
    );
    let err = load(&main).unwrap_err();
    assert_eq!(err.file, dir.0.join("bad.conf"));
    assert_eq!(err.line, 3);
    // ignore_missing forgives a missing file, not a broken one.
    let main = dir.write(
        "main2.conf",
        "<busconfig>\n<listen>x</listen>\n<include ignore_missing=\"yes\">bad.conf</include>\n</busconfig>",
    );
    assert_eq!(load(&main).unwrap_err().line, 3);
}

#[test]
fn include_loops_are_refused_at_the_include_line() {
    let dir = TempDir::new("loop");
    let one = dir.write(
        "one.conf",
        "<busconfig>\n<listen>x</listen>\n<include>two.conf</include>\n</busconfig>",
    );
    dir.write(
        "two.conf",
        "<busconfig>\n\n\n<include>./one.conf</include>\n</busconfig>",
    );
    let err = load(&one).unwrap_err();
    assert_eq!(err.file, dir.0.join("two.conf"));
    assert_eq!(err.line, 4);
    assert!(
        err.reason.starts_with("circular inclusion of file"),
        "{err}"
    );

    let me = dir.write(
        "me.conf",
        "<busconfig>\n<include>me.conf</include>\n</busconfig>",
    );
    let err = load(&me).unwrap_err();
    assert_eq!((err.file, err.line), (me, 2));
}

#[test]
fn includedir_reads_conf_files_in_name_order_and_skips_bad_ones() {
    let dir = TempDir::new("includedir");
    dir.write(
        "d/20-b.conf",
        "<busconfig><listen>unix:path=/b</listen></busconfig>",
    );
    dir.write(
        "d/10-a.conf",
        "<busconfig><listen>unix:path=/a</listen></busconfig>",
    );
    dir.write(
        "d/ignored.txt",
        "<busconfig><listen>unix:path=/no</listen></busconfig>",
    );
    dir.write(
        "d/15-bad.conf",
        "<busconfig><listen>unix:path=/half</listen>\n<bees/></busconfig>",
    );
    let main = dir.write(
        "main.conf",
        "<busconfig>\n<includedir>d</includedir>\n<includedir>/nonexistent/quickbus.d</includedir>\n</busconfig>",
    );
    let config = load(&main).unwrap();
    // The broken file left nothing behind, not even its first listen.
    assert_eq!(config.listen, vec!["unix:path=/a", "unix:path=/b"]);
    assert_eq!(config.warnings.len(), 1);
    assert!(
        config.warnings[0].contains("15-bad.conf:2"),
        "{:?}",
        config.warnings
    );
    assert_eq!(config.conf_dirs, vec![dir.0.join("d")]);
}

#[test]
fn standard_session_servicedirs_expand_from_the_environment() {
    fn env(name: &str) -> Option<String> {
        match name {
            "XDG_RUNTIME_DIR" => Some("/run/user/7".into()),
            "HOME" => Some("/home/seven".into()),
            _ => None,
        }
    }
    let mut config = BusConfig::default();
    Loader::with_env(env)
        .load_text(
            "<busconfig><servicedir>/first</servicedir><standard_session_servicedirs/>\
             <servicedir>/usr/share/dbus-1/services</servicedir></busconfig>",
            Path::new("/etc/x.conf"),
            &mut config,
        )
        .unwrap();
    let expected: Vec<PathBuf> = [
        "/first",
        "/run/user/7/dbus-1/services",
        "/home/seven/.local/share/dbus-1/services",
        "/usr/local/share/dbus-1/services",
        "/usr/share/dbus-1/services",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    assert_eq!(config.servicedirs, expected);

    let config = parse("<listen>x</listen><standard_system_servicedirs/>").unwrap();
    assert_eq!(
        config.servicedirs[0],
        PathBuf::from("/usr/local/share/dbus-1/system-services")
    );
}

#[test]
fn the_builtin_session_configuration() {
    let config = builtin_session().unwrap();
    assert_eq!(config.bus_type.as_deref(), Some("session"));
    assert_eq!(config.listen, vec!["unix:tmpdir=/tmp"]);
    assert_eq!(config.auth, vec!["EXTERNAL"]);
    assert!(config.keep_umask && !config.fork);
    assert!(config
        .servicedirs
        .contains(&PathBuf::from("/usr/share/dbus-1/services")));
    assert!(!config.policies.is_empty());
    assert_eq!(config.policies[0].scope, PolicyScope::Default);
    assert_eq!(config.policies[0].rules.len(), 3);
    assert!(config.policies[0].rules.iter().all(|r| r.allow));
    assert_eq!(config.limits.auth_timeout_ms, 240_000);
    assert_eq!(config.limits.max_completed_connections, 100_000);
    assert_eq!(config.limits.max_match_rules_per_connection, 50_000);
}

#[test]
fn the_command_line_picks_the_configuration() {
    let dir = TempDir::new("resolve");
    let file = dir.write(
        "bus.conf",
        "<busconfig><type>custom</type><listen>unix:path=/x</listen></busconfig>",
    );
    let config = resolve_with(&ConfigSource::File(file.clone()), Path::new("/unused")).unwrap();
    assert_eq!(config.bus_type.as_deref(), Some("custom"));
    // --session: the installed file when there is one...
    let config = resolve_with(&ConfigSource::Session, &file).unwrap();
    assert_eq!(config.bus_type.as_deref(), Some("custom"));
    // ...else the built-in one.
    let config = resolve_with(&ConfigSource::Session, &dir.0.join("absent.conf")).unwrap();
    assert_eq!(config, builtin_session().unwrap());
    // --system needs system.conf.
    match resolve_with(&ConfigSource::System, Path::new("/unused")) {
        Ok(config) => assert!(Path::new(SYSTEM_CONFIG_FILE).exists() && !config.listen.is_empty()),
        Err(err) => assert_eq!(err.file, PathBuf::from(SYSTEM_CONFIG_FILE)),
    }
    let options =
        crate::cli::parse_args(["quickbus-daemon", "--config-file", file.to_str().unwrap()])
            .unwrap();
    assert_eq!(
        resolve(&options).unwrap().bus_type.as_deref(),
        Some("custom")
    );
}

// --- Real files installed on this machine ---------------------------------

const DBUS_TEST_DATA: &str = "/usr/lib/dbus-1.0/installed-tests/dbus/data";

/// The `*.conf` files of a directory, sorted; none if it is absent.
fn conf_files(dir: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "conf") && p.is_file())
        .collect();
    files.sort();
    files
}

/// The `*.conf` files of a directory of dbus-daemon's test data. The test
/// command installs dbus-tests; without it these tests fail, never skip.
fn dbus_test_data(sub: &str) -> Vec<PathBuf> {
    let files = conf_files(&format!("{DBUS_TEST_DATA}/{sub}"));
    assert!(
        !files.is_empty(),
        "no {DBUS_TEST_DATA}/{sub}/*.conf on this machine: install dbus-tests (scripts/test.sh does)"
    );
    files
}

/// Load a fragment as dbus-daemon includes it (no `<listen>` required).
fn load_fragment(path: &Path) -> Result<BusConfig, ConfigError> {
    let mut config = BusConfig::default();
    Loader::new().load_file(path, &mut config)?;
    Ok(config)
}

#[test]
fn the_installed_session_and_system_configurations_load() {
    for file in [SESSION_CONFIG_FILE, SYSTEM_CONFIG_FILE] {
        assert!(
            Path::new(file).exists(),
            "{file} is not on this machine: install dbus-daemon (scripts/test.sh does)"
        );
        let config = load(file).unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.listen.is_empty(), "{file}");
        assert!(!config.policies.is_empty(), "{file}");
        assert!(config.warnings.is_empty(), "{file}: {:?}", config.warnings);
    }
}

#[test]
fn every_installed_system_d_fragment_loads() {
    for dir in ["/usr/share/dbus-1/system.d", "/etc/dbus-1/system.d"] {
        for file in conf_files(dir) {
            let config = load_fragment(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(!config.policies.is_empty(), "{}", file.display());
        }
    }
}

#[test]
fn every_valid_dbus_test_configuration_loads() {
    for sub in ["valid-config-files", "valid-config-files-system"] {
        let files = dbus_test_data(sub);
        for file in files {
            let config = load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                config.warnings.is_empty(),
                "{}: {:?}",
                file.display(),
                config.warnings
            );
        }
    }
}

#[test]
fn every_invalid_dbus_test_configuration_is_refused_with_a_line() {
    let files = dbus_test_data("invalid-config-files");
    for file in files {
        let err = load(&file).expect_err(&file.display().to_string());
        assert!(err.line > 0, "{err}");
        assert!(err.to_string().contains(".conf:"), "{err}");
    }
}

#[test]
fn dbus_test_equivalent_configurations_load_the_same() {
    let root = Path::new(DBUS_TEST_DATA).join("equiv-config-files");
    let Ok(groups) = std::fs::read_dir(&root) else {
        panic!(
            "{} is not on this machine: install dbus-tests (scripts/test.sh does)",
            root.display()
        );
    };
    for group in groups.filter_map(|g| g.ok()) {
        let files = conf_files(group.path().to_str().unwrap());
        assert!(files.len() >= 2, "{}", group.path().display());
        let loaded: Vec<BusConfig> = files
            .iter()
            .map(|f| {
                let mut config = load(f).unwrap_or_else(|e| panic!("{e}"));
                config.files.clear();
                for policy in &mut config.policies {
                    policy.file.clear();
                    policy.line = 0;
                    for rule in &mut policy.rules {
                        rule.file.clear();
                        rule.line = 0;
                    }
                }
                config
            })
            .collect();
        for other in &loaded[1..] {
            assert_eq!(&loaded[0], other, "{}", group.path().display());
        }
    }
}
