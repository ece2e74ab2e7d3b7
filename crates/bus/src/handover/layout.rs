//! What the daemon's tripwire for the handover's layout
//! (`restart/layout.rs` in quickbus-daemon) needs of the bus: a scope in
//! which a tracer may read made-up values, and the bus's enums.
//!
//! The tracer makes up every value it reads; it explores an enum one
//! variant per pass, and reaches an enum held in an `Option`, a list or a
//! map in its first pass only, so each enum is traced on its own too.
//!
//! Owns: nothing. May touch: the handover's scope.

use std::os::fd::OwnedFd;

use bytes::Bytes;

use super::{Clock, FdList, Scope, SCOPE};

/// Runs `trace` (which deserializes) as inside [`super::restoring`],
/// except that each fd read, whatever its index, is a copy of `fd`; the
/// slices read lie in `buffers`.
pub fn tracing<R>(clock: Clock, fd: OwnedFd, buffers: Vec<Bytes>, trace: impl FnOnce() -> R) -> R {
    SCOPE.with(|s| {
        *s.borrow_mut() = Some(Scope::Restoring {
            clock,
            fds: Vec::new(),
            buffers,
            fd_lists: Vec::new(),
            every_fd: Some(fd),
            rejected: None,
        })
    });
    let result = trace();
    SCOPE.with(|s| s.borrow_mut().take());
    result
}

/// A container instance's metadata as the handover writes it (a value as
/// the body of a tiny message): a sample the tracer cannot make up, since
/// reading it parses the message.
pub struct Metadata(pub quickbus_wire::Value);

impl serde::Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::containers::value_as_message::serialize(&self.0, s)
    }
}

/// How many times a connection installed a match rule, as the handover
/// writes it: a sample the tracer cannot make up, since reading it
/// refuses the tracer's 0.
pub struct MatchRuleCount;

impl serde::Serialize for MatchRuleCount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::match_index::RuleCount(1).serialize(s)
    }
}

/// Something done to types the handover holds.
pub trait TypeVisitor {
    fn visit<T: serde::de::DeserializeOwned>(&mut self);
}

/// Visits every enum the bus's part of the handover holds (the daemon
/// visits its own). An enum missing here shows in the layout test as
/// traced in part, and fails it.
pub fn each_enum(visitor: &mut impl TypeVisitor) {
    visitor.visit::<FdList>();
    visitor.visit::<crate::activation::Waiter>();
    visitor.visit::<crate::flow::HoldReason>();
    visitor.visit::<crate::flow::Kind>();
    visitor.visit::<crate::app_filter::Level>();
    visitor.visit::<crate::match_rule::ArgKind>();
    visitor.visit::<crate::match_rule::PathMatch>();
    visitor.visit::<crate::policy::RuleKind>();
    visitor.visit::<crate::policy::NameMatch>();
    visitor.visit::<crate::UserGroups>();
    visitor.visit::<quickbus_wire::MessageType>();
}
