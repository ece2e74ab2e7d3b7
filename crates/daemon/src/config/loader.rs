//! Walking a parsed busconfig document into a [`BusConfig`], following
//! includes. Includes are read into the same configuration at the point
//! where they appear, which gives dbus-daemon's merge rules for free:
//! lists (listen, auth, servicedir, policies) accumulate in document
//! order, single values (type, user, pidfile, servicehelper, limits) are
//! set by the last file that sets them, flags (fork, syslog, ...) once set
//! stay set.

use std::io;
use std::path::{Path, PathBuf};

use super::xml::{self, Element};
use super::{policy, servicedirs, BusConfig, ConfigError};

pub struct Loader {
    /// Files being read, outermost first, to refuse include loops.
    stack: Vec<PathBuf>,
    env: fn(&str) -> Option<String>,
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Loader {
    pub fn new() -> Loader {
        Loader {
            stack: Vec::new(),
            env: process_env,
        }
    }

    /// Read the document `text`, which came from `file`, into `config`.
    pub fn load_text(
        &mut self,
        text: &str,
        file: &Path,
        config: &mut BusConfig,
    ) -> Result<(), ConfigError> {
        let root = xml::parse(text).map_err(|e| ConfigError::at(file, e.line, e.reason))?;
        self.stack.push(identity(file));
        let result = Context { file, loader: self }.busconfig(&root, config);
        self.stack.pop();
        result
    }

    /// Read the file `file` into `config`.
    pub fn load_file(&mut self, file: &Path, config: &mut BusConfig) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| ConfigError::file(file, format!("cannot read the file: {e}")))?;
        config.files.push(file.to_path_buf());
        self.load_text(&text, file, config)
    }
}

/// The same file reached by two spellings must count as one for loops.
fn identity(file: &Path) -> PathBuf {
    file.canonicalize().unwrap_or_else(|_| file.to_path_buf())
}

struct Context<'a> {
    file: &'a Path,
    loader: &'a mut Loader,
}

/// How an element of `<busconfig>` is shaped.
enum Shape {
    /// Text content required, no children.
    Content,
    /// No text, no children.
    Empty,
}

impl Context<'_> {
    fn error(&self, element: &Element, reason: impl Into<String>) -> ConfigError {
        ConfigError::at(self.file, element.line, reason)
    }

    /// Paths in a file are relative to the file's directory.
    fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            return path.to_path_buf();
        }
        self.file.parent().unwrap_or(Path::new("/")).join(path)
    }

    fn busconfig(mut self, root: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        if root.name != "busconfig" {
            return Err(self.error(
                root,
                format!(
                    "unknown element <{}> at root of configuration file",
                    root.name
                ),
            ));
        }
        self.no_attributes(root, &[])?;
        self.no_text(root)?;
        for child in &root.children {
            self.child(child, config)?;
        }
        Ok(())
    }

    fn child(&mut self, element: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        let text = element.text.as_str();
        match element.name.as_str() {
            "user" => {
                self.shape(element, Shape::Content, &[])?;
                config.user = Some(text.to_owned());
            }
            "type" => {
                self.shape(element, Shape::Content, &[])?;
                config.bus_type = Some(text.to_owned());
            }
            "pidfile" => {
                self.shape(element, Shape::Content, &[])?;
                config.pidfile = Some(text.into());
            }
            "listen" => {
                self.shape(element, Shape::Content, &[])?;
                config.listen.push(text.to_owned());
            }
            "auth" => {
                self.shape(element, Shape::Content, &[])?;
                config.auth.push(text.to_owned());
            }
            "servicedir" => {
                self.shape(element, Shape::Content, &[])?;
                let dir = self.resolve(text);
                push_unique(&mut config.servicedirs, dir);
            }
            "servicehelper" => {
                self.shape(element, Shape::Content, &[])?;
                config.servicehelper = Some(self.resolve(text));
            }
            "fork" => {
                self.shape(element, Shape::Empty, &[])?;
                config.fork = true;
            }
            "keep_umask" => {
                self.shape(element, Shape::Empty, &[])?;
                config.keep_umask = true;
            }
            "syslog" => {
                self.shape(element, Shape::Empty, &[])?;
                config.syslog = true;
            }
            "allow_anonymous" => {
                self.shape(element, Shape::Empty, &[])?;
                config.allow_anonymous = true;
            }
            "standard_session_servicedirs" => {
                self.shape(element, Shape::Empty, &[])?;
                for dir in servicedirs::session(self.loader.env) {
                    push_unique(&mut config.servicedirs, dir);
                }
            }
            "standard_system_servicedirs" => {
                self.shape(element, Shape::Empty, &[])?;
                for dir in servicedirs::system() {
                    push_unique(&mut config.servicedirs, dir);
                }
            }
            "limit" => {
                self.shape(element, Shape::Content, &["name"])?;
                let name = element.attribute("name").ok_or_else(|| {
                    self.error(element, "<limit> element must have a \"name\" attribute")
                })?;
                config
                    .limits
                    .set(name, text)
                    .map_err(|reason| self.error(element, reason.to_string()))?;
            }
            "include" => self.include(element, config)?,
            "includedir" => self.includedir(element, config)?,
            "policy" => self.policy(element, config)?,
            "selinux" => self.selinux(element, config)?,
            "apparmor" => {
                self.shape(element, Shape::Empty, &["mode"])?;
                if let Some(mode) = element.attribute("mode") {
                    if !matches!(mode, "required" | "enabled" | "disabled") {
                        return Err(self.error(
                            element,
                            format!("mode attribute on <apparmor> must have value \"required\", \"enabled\" or \"disabled\", not \"{mode}\""),
                        ));
                    }
                    config.apparmor = Some(mode.to_owned());
                }
            }
            other => {
                return Err(self.error(
                    element,
                    format!(
                        "element <{other}> not allowed inside <busconfig> in configuration file"
                    ),
                ))
            }
        }
        Ok(())
    }

    /// Check attributes, text and children against what the element takes.
    fn shape(&self, element: &Element, shape: Shape, allowed: &[&str]) -> Result<(), ConfigError> {
        self.no_attributes(element, allowed)?;
        if let Some(child) = element.children.first() {
            return Err(self.error(
                child,
                format!("element <{}> is not allowed in this context", child.name),
            ));
        }
        match shape {
            Shape::Content if element.text.is_empty() => Err(self.error(
                element,
                format!(
                    "XML element <{}> was expected to have content inside it",
                    element.name
                ),
            )),
            Shape::Content => Ok(()),
            Shape::Empty => self.no_text(element),
        }
    }

    fn no_attributes(&self, element: &Element, allowed: &[&str]) -> Result<(), ConfigError> {
        match element
            .attributes
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((key, _)) => Err(self.error(
                element,
                format!(
                    "attribute \"{key}\" is invalid on <{}> element in this context",
                    element.name
                ),
            )),
            None => Ok(()),
        }
    }

    fn no_text(&self, element: &Element) -> Result<(), ConfigError> {
        if element.text.is_empty() {
            return Ok(());
        }
        Err(self.error(
            element,
            format!(
                "no text content expected inside XML element <{}> in configuration file",
                element.name
            ),
        ))
    }

    fn yes_no(&self, element: &Element, attribute: &str) -> Result<bool, ConfigError> {
        match element.attribute(attribute) {
            None | Some("no") => Ok(false),
            Some("yes") => Ok(true),
            Some(_) => Err(self.error(
                element,
                format!("{attribute} attribute must have value \"yes\" or \"no\""),
            )),
        }
    }

    fn include(&mut self, element: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        self.shape(
            element,
            Shape::Content,
            &[
                "ignore_missing",
                "if_selinux_enabled",
                "selinux_root_relative",
            ],
        )?;
        let ignore_missing = self.yes_no(element, "ignore_missing")?;
        let if_selinux_enabled = self.yes_no(element, "if_selinux_enabled")?;
        let selinux_root_relative = self.yes_no(element, "selinux_root_relative")?;
        // quickbus has no SELinux support, so it behaves as dbus-daemon
        // does on a system without SELinux.
        if if_selinux_enabled {
            return Ok(());
        }
        if selinux_root_relative {
            return Err(self.error(
                element,
                "could not determine SELinux policy root for relative inclusion (SELinux is not supported)",
            ));
        }
        let path = self.resolve(&element.text);
        if self.loader.stack.contains(&identity(&path)) {
            return Err(self.error(
                element,
                format!("circular inclusion of file '{}'", path.display()),
            ));
        }
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && ignore_missing => return Ok(()),
            Err(e) => {
                return Err(self.error(element, format!("cannot include '{}': {e}", path.display())))
            }
            Ok(_) => {}
        }
        self.loader.load_file(&path, config)
    }

    /// Every `*.conf` of the directory, in name order. As in dbus-daemon,
    /// a missing directory is skipped, and a file that fails to load is
    /// skipped with a warning, leaving the configuration as it was.
    fn includedir(&mut self, element: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        self.shape(element, Shape::Content, &[])?;
        let dir = self.resolve(&element.text);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(self.error(
                    element,
                    format!("cannot read directory '{}': {e}", dir.display()),
                ))
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.to_str().is_some_and(|p| p.ends_with(".conf")))
            .collect();
        files.sort();
        for file in files {
            if self.loader.stack.contains(&identity(&file)) {
                config.warnings.push(format!(
                    "{}:{}: skipping '{}': circular inclusion",
                    self.file.display(),
                    element.line,
                    file.display()
                ));
                continue;
            }
            let mut attempt = config.clone();
            match self.loader.load_file(&file, &mut attempt) {
                Ok(()) => *config = attempt,
                Err(e) => config.warnings.push(format!("skipping {e}")),
            }
        }
        push_unique(&mut config.conf_dirs, dir);
        Ok(())
    }

    fn policy(&mut self, element: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        let scope = policy::scope(element).map_err(|reason| self.error(element, reason))?;
        self.no_text(element)?;
        let mut rules = Vec::new();
        for child in &element.children {
            if !matches!(child.name.as_str(), "allow" | "deny") {
                return Err(self.error(
                    child,
                    format!(
                        "element <{}> not allowed inside <policy> in configuration file",
                        child.name
                    ),
                ));
            }
            if let Some(grandchild) = child.children.first() {
                return Err(self.error(
                    grandchild,
                    format!(
                        "element <{}> is not allowed in this context",
                        grandchild.name
                    ),
                ));
            }
            self.no_text(child)?;
            rules.push(policy::rule(child, self.file).map_err(|reason| self.error(child, reason))?);
        }
        config.policies.push(policy::Policy {
            scope,
            rules,
            file: self.file.to_path_buf(),
            line: element.line,
        });
        Ok(())
    }

    fn selinux(&mut self, element: &Element, config: &mut BusConfig) -> Result<(), ConfigError> {
        self.no_attributes(element, &[])?;
        self.no_text(element)?;
        for child in &element.children {
            if child.name != "associate" {
                return Err(self.error(
                    child,
                    format!(
                        "element <{}> not allowed inside <selinux> in configuration file",
                        child.name
                    ),
                ));
            }
            self.shape(child, Shape::Empty, &["own", "context"])?;
            match (child.attribute("own"), child.attribute("context")) {
                (Some(own), Some(context)) => config
                    .selinux_associations
                    .push((own.to_owned(), context.to_owned())),
                _ => {
                    return Err(self.error(
                        child,
                        "element <associate> must have attributes own=\"<servicename>\" and context=\"<selinux context>\"",
                    ))
                }
            }
        }
        Ok(())
    }
}

fn push_unique(list: &mut Vec<PathBuf>, item: PathBuf) {
    if !list.contains(&item) {
        list.push(item);
    }
}

#[cfg(test)]
impl Loader {
    /// A loader that reads variables from `env` instead of the process.
    pub fn with_env(env: fn(&str) -> Option<String>) -> Loader {
        Loader {
            stack: Vec::new(),
            env,
        }
    }
}
