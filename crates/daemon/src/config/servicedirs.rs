//! What `<standard_session_servicedirs/>` and
//! `<standard_system_servicedirs/>` stand for, in dbus-daemon's order.

use std::path::PathBuf;

/// The session directories, most important first:
/// `$XDG_RUNTIME_DIR/dbus-1/services` (if set), then
/// `$XDG_DATA_HOME/dbus-1/services` (default `~/.local/share`), then each
/// of `$XDG_DATA_DIRS` (default `/usr/local/share:/usr/share`), then
/// `/usr/share/dbus-1/services` (dbus-daemon's own data dir).
/// `env` looks a variable up; an empty value counts as unset.
pub fn session(env: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(runtime) = env("XDG_RUNTIME_DIR") {
        roots.push(runtime.into());
    }
    match (env("XDG_DATA_HOME"), env("HOME")) {
        (Some(data_home), _) => roots.push(data_home.into()),
        (None, Some(home)) => roots.push(PathBuf::from(home).join(".local/share")),
        (None, None) => {}
    }
    let data_dirs = env("XDG_DATA_DIRS").unwrap_or_else(|| "/usr/local/share:/usr/share".into());
    roots.extend(
        data_dirs
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
    );
    roots.push("/usr/share".into());
    unique(roots.into_iter().map(|r| r.join("dbus-1/services")))
}

/// The system directories, as dbus-daemon built for /usr searches them.
pub fn system() -> Vec<PathBuf> {
    unique(
        ["/usr/local/share", "/usr/share", "/lib"]
            .into_iter()
            .map(|r| PathBuf::from(r).join("dbus-1/system-services")),
    )
}

/// Keep the first occurrence of each directory.
pub fn unique(dirs: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        if !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn session_dirs_follow_the_xdg_variables_in_order() {
        let dirs = session(env_of(&[
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("XDG_DATA_HOME", "/home/u/data"),
            ("XDG_DATA_DIRS", "/opt/share:/usr/share"),
            ("HOME", "/home/u"),
        ]));
        assert_eq!(
            dirs,
            paths(&[
                "/run/user/1000/dbus-1/services",
                "/home/u/data/dbus-1/services",
                "/opt/share/dbus-1/services",
                "/usr/share/dbus-1/services",
            ])
        );
    }

    #[test]
    fn session_dirs_defaults_when_variables_are_unset_or_empty() {
        let dirs = session(env_of(&[("HOME", "/home/u"), ("XDG_DATA_DIRS", "")]));
        assert_eq!(
            dirs,
            paths(&[
                "/home/u/.local/share/dbus-1/services",
                "/usr/local/share/dbus-1/services",
                "/usr/share/dbus-1/services",
            ])
        );
        assert_eq!(
            session(env_of(&[])),
            paths(&[
                "/usr/local/share/dbus-1/services",
                "/usr/share/dbus-1/services"
            ])
        );
    }

    #[test]
    fn system_dirs() {
        assert_eq!(
            system(),
            paths(&[
                "/usr/local/share/dbus-1/system-services",
                "/usr/share/dbus-1/system-services",
                "/lib/dbus-1/system-services",
            ])
        );
    }
}
