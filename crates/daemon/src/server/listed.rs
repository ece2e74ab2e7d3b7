//! Which connections have output to write this turn (`Server::dirty`):
//! each is listed once however many messages it was given. A broadcast
//! burst would otherwise list every receiver once per message, and
//! sorting those out cost the loop more than the bus's routing of a
//! delivery (callgrind, fan-out to 10 of 32 B: docs/performance.md, "The
//! split after this session's changes", and its kept output).
//!
//! Owns: one flag per connection. May touch: the list it adds to.

use quickbus_bus::ConnId;

/// Whether a connection is in the list; the flush clears it as it takes
/// the connection out.
#[derive(Debug, Default)]
pub(super) struct Listed(bool);

impl Listed {
    /// List connection `id` in `dirty` unless it is there.
    pub(super) fn list(&mut self, id: ConnId, dirty: &mut Vec<ConnId>) {
        if !std::mem::replace(&mut self.0, true) {
            dirty.push(id);
        }
    }

    /// It was taken out of the list: what comes next lists it again.
    pub(super) fn taken(&mut self) {
        self.0 = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_listed_once_until_it_is_taken_out() {
        let mut dirty = Vec::new();
        let mut listed = Listed::default();
        for _ in 0..3 {
            listed.list(ConnId(7), &mut dirty);
        }
        assert_eq!(dirty, [ConnId(7)]);
        dirty.clear();
        listed.taken();
        listed.list(ConnId(7), &mut dirty);
        assert_eq!(dirty, [ConnId(7)]);
    }
}
