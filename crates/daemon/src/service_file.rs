//! `.service` files: the `[D-BUS Service]` desktop-entry group that names an
//! activatable service (`Name`, `Exec`, `User`, `SystemdService`,
//! `AssumedAppArmorLabel`), and the
//! scan of the configured service directories.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use quickbus_wire::names::is_valid_bus_name;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceFile {
    pub path: PathBuf,
    pub name: String,
    pub exec: Option<String>,
    pub user: Option<String>,
    pub systemd_service: Option<String>,
    /// The AppArmor label the service will run under, which dbus-daemon
    /// asks AppArmor about when a message would activate it.
    pub assumed_apparmor_label: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{path}:{line}: {reason}")]
pub struct ServiceFileError {
    pub path: String,
    pub line: usize,
    pub reason: String,
}

const GROUP: &str = "D-BUS Service";

pub fn parse(path: &Path, text: &str) -> Result<ServiceFile, ServiceFileError> {
    let err = |line: usize, reason: String| ServiceFileError {
        path: path.display().to_string(),
        line,
        reason,
    };
    let mut group: Option<&str> = None;
    let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
    let mut seen_group = false;
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or_else(|| err(line_no, format!("malformed group header '{line}'")))?;
            if name == GROUP {
                if seen_group {
                    return Err(err(line_no, format!("duplicate group [{GROUP}]")));
                }
                seen_group = true;
            }
            group = Some(name);
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| err(line_no, format!("expected 'Key=Value', found '{line}'")))?;
        let Some(current) = group else {
            return Err(err(line_no, "key outside of any group".into()));
        };
        if current != GROUP {
            continue; // other groups are allowed and ignored
        }
        let key = key.trim();
        if keys.insert(key, value.trim()).is_some() {
            return Err(err(line_no, format!("duplicate key '{key}'")));
        }
    }
    if !seen_group {
        return Err(err(0, format!("no [{GROUP}] group")));
    }
    let name = keys
        .get("Name")
        .ok_or_else(|| err(0, "missing Name=".into()))?
        .to_string();
    if !is_valid_bus_name(&name) || name.starts_with(':') {
        return Err(err(
            0,
            format!("Name={name} is not a valid well-known bus name"),
        ));
    }
    let get = |k: &str| keys.get(k).map(|v| v.to_string());
    Ok(ServiceFile {
        path: path.to_path_buf(),
        name,
        exec: get("Exec"),
        user: get("User"),
        systemd_service: get("SystemdService"),
        assumed_apparmor_label: get("AssumedAppArmorLabel"),
    })
}

/// Activatable name -> `SystemdService=` unit, for the names that have one.
pub fn systemd_units(services: &[ServiceFile]) -> HashMap<String, String> {
    services
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.systemd_service.clone()?)))
        .collect()
}

/// Activatable name -> `AssumedAppArmorLabel=`, for the names that have one.
pub fn assumed_apparmor_labels(services: &[ServiceFile]) -> HashMap<String, String> {
    services
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.assumed_apparmor_label.clone()?)))
        .collect()
}

/// Every valid `*.service` file of the directories, in directory order;
/// for a name defined twice the first directory wins, as in dbus-daemon.
/// Unreadable or invalid files are reported through `warn` and skipped.
pub fn scan(dirs: &[PathBuf], mut warn: impl FnMut(String)) -> Vec<ServiceFile> {
    let mut by_name: BTreeMap<String, ServiceFile> = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue; // missing service dirs are normal
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "service"))
            .collect();
        paths.sort();
        for path in paths {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    warn(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            match parse(&path, &text) {
                Ok(service) => {
                    by_name.entry(service.name.clone()).or_insert(service);
                }
                Err(e) => warn(e.to_string()),
            }
        }
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_keys_dbus_daemon_reads() {
        let s = parse(
            Path::new("/x/a.service"),
            "# comment\n[D-BUS Service]\nName=org.example.A\nExec=/usr/bin/a --flag\nUser=nobody\nSystemdService=a.service\n",
        )
        .unwrap();
        assert_eq!(s.name, "org.example.A");
        assert_eq!(s.exec.as_deref(), Some("/usr/bin/a --flag"));
        assert_eq!(s.user.as_deref(), Some("nobody"));
        assert_eq!(s.systemd_service.as_deref(), Some("a.service"));
        assert_eq!(s.assumed_apparmor_label, None);
        let confined = parse(
            Path::new("/x/c.service"),
            "[D-BUS Service]\nName=org.example.C\nExec=/usr/bin/c\nAssumedAppArmorLabel=/usr/bin/c\n",
        )
        .unwrap();
        assert_eq!(
            confined.assumed_apparmor_label.as_deref(),
            Some("/usr/bin/c")
        );
    }

    #[test]
    fn assumed_apparmor_labels_come_from_the_files_that_name_one() {
        let file = |name: &str, label: Option<&str>| ServiceFile {
            path: format!("/x/{name}.service").into(),
            name: name.into(),
            exec: Some("/bin/true".into()),
            user: None,
            systemd_service: None,
            assumed_apparmor_label: label.map(String::from),
        };
        let labels = assumed_apparmor_labels(&[
            file("org.example.A", Some("/usr/bin/a")),
            file("org.example.B", None),
        ]);
        assert_eq!(
            labels,
            HashMap::from([("org.example.A".to_owned(), "/usr/bin/a".to_owned())])
        );
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = parse(
            Path::new("/x/b.service"),
            "[D-BUS Service]\nName=org.x.B\nnonsense\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("/x/b.service:3:"), "{e}");
        let e = parse(
            Path::new("/x/c.service"),
            "[D-BUS Service]\nExec=/bin/true\n",
        )
        .unwrap_err();
        assert!(e.reason.contains("Name"));
        let e = parse(Path::new("/x/d.service"), "[D-BUS Service]\nName=:1.5\n").unwrap_err();
        assert!(e.reason.contains("not a valid"));
        let e = parse(Path::new("/x/e.service"), "[Other]\nName=org.x.E\n").unwrap_err();
        assert!(e.reason.contains("no [D-BUS Service]"));
    }

    #[test]
    fn scan_skips_bad_files_and_keeps_the_first_definition() {
        let base = std::env::temp_dir().join(format!("qb-services-{}", std::process::id()));
        let (d1, d2) = (base.join("one"), base.join("two"));
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        std::fs::write(
            d1.join("a.service"),
            "[D-BUS Service]\nName=org.x.A\nExec=/one\n",
        )
        .unwrap();
        std::fs::write(
            d2.join("a.service"),
            "[D-BUS Service]\nName=org.x.A\nExec=/two\n",
        )
        .unwrap();
        std::fs::write(d2.join("b.service"), "[D-BUS Service]\nName=org.x.B\n").unwrap();
        std::fs::write(d2.join("bad.service"), "garbage\n").unwrap();
        std::fs::write(d2.join("ignored.txt"), "[D-BUS Service]\nName=org.x.C\n").unwrap();
        let mut warnings = Vec::new();
        let found = scan(&[d1, d2, base.join("missing")], |w| warnings.push(w));
        let names: Vec<_> = found.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["org.x.A", "org.x.B"]);
        assert_eq!(found[0].exec.as_deref(), Some("/one"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
