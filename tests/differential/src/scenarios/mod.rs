//! The scenarios: each a name, the configuration and service files it
//! needs, and its steps (a function of a [`Script`]). Adding one is a few
//! lines in the family it belongs to; a family is a table where the
//! scenarios differ only in data.

mod activation;
mod driver;
mod fds;
mod malformed;
mod matching;
mod monitors;
mod names;
mod routing;
mod sasl;

use quickbus_client::{MessageBuilder, Value};

use crate::script::Script;

pub use crate::script::{bus_call, s, u};

/// One scenario.
pub struct Scenario {
    pub name: String,
    /// Extra elements inside `<busconfig>`.
    pub config: String,
    /// `.service` files: (file name, contents). `{helper}` in the contents
    /// stands for the activatable helper program.
    pub services: Vec<(String, String)>,
    pub run: Box<dyn Fn(&mut Script) + Send + Sync>,
}

impl Scenario {
    pub fn new(
        name: impl Into<String>,
        run: impl Fn(&mut Script) + Send + Sync + 'static,
    ) -> Scenario {
        Scenario {
            name: name.into(),
            config: String::new(),
            services: Vec::new(),
            run: Box::new(run),
        }
    }

    /// Adds `extra` inside `<busconfig>`.
    pub fn config(mut self, extra: &str) -> Scenario {
        self.config.push_str(extra);
        self
    }

    /// Adds a service file for `name` running `exec`.
    pub fn service(mut self, name: &str, exec: &str) -> Scenario {
        self.services.push((
            format!("{name}.service"),
            format!("[D-BUS Service]\nName={name}\nExec={exec}\n"),
        ));
        self
    }
}

/// Every scenario, in a stable order.
pub fn all() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.extend(driver::scenarios());
    all.extend(names::scenarios());
    all.extend(matching::scenarios());
    all.extend(routing::scenarios());
    all.extend(activation::scenarios());
    all.extend(monitors::scenarios());
    all.extend(fds::scenarios());
    all.extend(malformed::scenarios());
    all.extend(sasl::scenarios());
    all
}

/// A method call from a client to the peer `destination`, at /x, interface
/// com.example.Test.
pub fn call_to(destination: &str, member: &str) -> MessageBuilder {
    MessageBuilder::method_call("/x", member)
        .interface("com.example.Test")
        .destination(destination)
}

/// A broadcast signal at /x, interface com.example.Test.
pub fn signal(member: &str) -> MessageBuilder {
    MessageBuilder::signal("/x", "com.example.Test", member)
}

/// An array of strings.
pub fn strings(items: &[&str]) -> Value {
    Value::Array {
        elem_sig: "s".into(),
        items: items.iter().map(|i| s(i)).collect(),
    }
}
