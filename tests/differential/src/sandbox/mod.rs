//! The sandbox differential test (issue 26): the same xdg-dbus-proxy rule
//! sets and the same scripted actions, by a filtered app and by unfiltered
//! services on the same bus, run on two [`Side`]s; what the app saw and
//! what each service received are compared, normalised
//! ([`render`]). The reference is xdg-dbus-proxy in front of dbus-daemon;
//! the side under test is a quickbus container socket with the rules as
//! its `org.quickbus.Filter` named argument, or xdg-dbus-proxy in front of
//! quickbus-daemon.

pub mod cases;
pub mod container;
pub mod harness;
pub mod render;
pub mod side;

pub use harness::Sandbox;
pub use side::{Programs, Side};

use crate::script::Transcript;

/// One case: a rule set (xdg-dbus-proxy options after `--filter`), the
/// `.service` files the bus needs (file name, contents) and the steps.
pub struct Case {
    pub name: String,
    pub rules: Vec<String>,
    pub services: Vec<(String, String)>,
    pub run: Box<dyn Fn(&mut Sandbox) + Send + Sync>,
}

impl Case {
    pub fn new(
        name: impl Into<String>,
        rules: &[&str],
        run: impl Fn(&mut Sandbox) + Send + Sync + 'static,
    ) -> Case {
        Case {
            name: name.into(),
            rules: rules.iter().map(|r| r.to_string()).collect(),
            services: Vec::new(),
            run: Box::new(run),
        }
    }

    /// Adds an activatable service file for `name` (never started: its
    /// program is /bin/false).
    pub fn activatable(mut self, name: &str) -> Case {
        self.services.push((
            format!("{name}.service"),
            format!("[D-BUS Service]\nName={name}\nExec=/bin/false\n"),
        ));
        self
    }
}

/// Runs `case` on `side` and returns its transcript.
pub fn run(case: &Case, side: Side, programs: &Programs) -> Transcript {
    let mut sandbox = Sandbox::start(side, programs, &case.rules, &case.services);
    (case.run)(&mut sandbox);
    sandbox.finish()
}
