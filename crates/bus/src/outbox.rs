//! One connection's outgoing messages: the items in order, how much of
//! the first is written, and their counts, changed only together.
//!
//! The bus keeps one per connection in its queue ([`crate::overflow`]),
//! which also moves the user's tally in the same calls; the daemon keeps
//! one, that nobody counts, for the SASL replies of a connection the bus
//! does not know yet. Writing is the daemon's (the socket is its):
//! [`Outbox::flush`] asks it for one write of the slices
//! [`Outbox::next_write`] gives, and takes out what the socket took, until
//! the socket is full; [`Outbox::write_ahead`] makes the first such write (a
//! worker thread's, from an outbox the bus lent it: `crate::bus::lending`).
//!
//! Owns: the items, the offset, the counts. May touch: nothing.

use crate::fds::PassedFd;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;

use bytes::Bytes;

use crate::OutMessage;

/// Most messages written by one `sendmsg` (two iovecs each; IOV_MAX is 1024).
pub const MAX_MESSAGES_PER_WRITE: usize = 256;

/// Something queued for writing: a header and a body sent back to back,
/// with fds attached to its first byte. The receivers of a broadcast
/// share all three, and keep sharing them across a restart in place.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OutItem {
    #[serde(with = "crate::handover::shared_bytes")]
    pub header: Bytes,
    #[serde(with = "crate::handover::shared_bytes")]
    pub body: Bytes,
    #[serde(with = "crate::handover::optional_shared_fds")]
    pub fds: Option<Arc<Vec<PassedFd>>>,
}

impl OutItem {
    /// Bytes without fds (a SASL reply).
    pub fn raw(bytes: Bytes) -> OutItem {
        OutItem {
            header: bytes,
            body: Bytes::new(),
            fds: None,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.header.len() + self.body.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn fd_count(&self) -> usize {
        self.fds.as_ref().map_or(0, |f| f.len())
    }
}

impl From<OutMessage> for OutItem {
    #[inline]
    fn from(msg: OutMessage) -> OutItem {
        OutItem {
            header: msg.frame.header,
            body: msg.frame.body,
            fds: (!msg.fds.is_empty()).then_some(msg.fds),
        }
    }
}

/// The items, in order, with the written part of the first and the
/// counts of what is left. A restart in place hands over the items and
/// the offset ([`Handed`]); the counts follow from them and are counted
/// again.
#[derive(Debug, Default)]
pub struct Outbox {
    items: VecDeque<OutItem>,
    /// Bytes of `items.front()` already written.
    offset: usize,
    /// Bytes not written yet (of all items, less `offset`).
    bytes: usize,
    /// Fds held by the items (a message's fds go with its first byte, but
    /// count until the whole message is written).
    fds: usize,
    /// This is the empty place of an outbox lent out of its queue for a
    /// write on another thread (`crate::bus::lending`): nothing may go in,
    /// and no restart may hand it over, until the outbox is back.
    lent: bool,
    /// A write made ahead on another thread took out what it wrote, and
    /// its counts wait to be settled by the next [`Outbox::flush`], whose
    /// first write is that one (see [`Outbox::write_ahead`]). Until then
    /// `bytes` and `fds` still count it, as if it were not written yet.
    ahead: Option<Unsettled>,
}

/// What a write made ahead took out of an [`Outbox`], not settled yet.
#[derive(Clone, Copy, Debug)]
struct Unsettled {
    bytes: usize,
    fds: usize,
}

/// An [`Outbox`] as it crosses a restart: what its counts follow from.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename = "Outbox")]
struct Handed<Items> {
    items: Items,
    offset: usize,
}

impl serde::Serialize for Outbox {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        debug_assert!(
            !self.lent && self.ahead.is_none(),
            "a restart's state taken while an outbox is lent or unsettled"
        );
        if self.lent || self.ahead.is_some() {
            return Err(crate::handover::refuse(
                "a queue is lent out for a write (a restart happens between turns)",
            ));
        }
        Handed {
            items: &self.items,
            offset: self.offset,
        }
        .serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Outbox {
    /// A queue whose items or offset cannot be one says why (a restart's
    /// log names it: [`crate::handover::reject`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Outbox, D::Error> {
        Outbox::handed_back(Handed::deserialize(d)?).map_err(crate::handover::reject)
    }
}

impl Outbox {
    /// The queue a restart handed over, its counts counted again.
    fn handed_back(handed: Handed<VecDeque<OutItem>>) -> Result<Outbox, &'static str> {
        let Handed { items, offset } = handed;
        if items.iter().any(OutItem::is_empty) {
            return Err("an empty message in a queue");
        }
        if offset > 0 && items.front().is_none_or(|front| offset >= front.len()) {
            return Err("a queue written past the end of its first message");
        }
        let mut outbox = Outbox::default();
        for item in items {
            outbox.push(item);
        }
        outbox.offset = offset;
        outbox.bytes -= offset;
        Ok(outbox)
    }

    /// The empty place an outbox lent out of its queue leaves there.
    pub(crate) fn lent_out() -> Outbox {
        Outbox {
            lent: true,
            ..Outbox::default()
        }
    }

    /// Whether a write made ahead waits for the next flush to settle
    /// its counts ([`Outbox::write_ahead`]).
    #[inline]
    pub fn written_ahead(&self) -> bool {
        self.ahead.is_some()
    }

    /// Whether this is the place of an outbox lent out.
    #[inline]
    pub(crate) fn is_lent_out(&self) -> bool {
        self.lent
    }

    /// Append `item`.
    #[inline]
    pub fn push(&mut self, item: OutItem) {
        // Every message has a header: an empty item would give a write
        // of nothing (see `flush`).
        debug_assert!(!item.is_empty(), "an empty item queued");
        debug_assert!(!self.lent, "a message queued while its queue is lent out");
        self.bytes += item.len();
        self.fds += item.fd_count();
        self.items.push_back(item);
    }

    /// Bytes not written yet.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Fds in the items not wholly written yet.
    #[inline]
    pub fn fds(&self) -> usize {
        self.fds
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Messages queued (the first possibly written in part).
    #[inline]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The item queued last (the bus's tests).
    #[cfg(test)]
    pub(crate) fn last(&self) -> Option<&OutItem> {
        self.items.back()
    }

    /// The bytes of the next write ([`Outbox::next_write`]) and how many
    /// fds ride on it (the bus's tests).
    #[cfg(test)]
    pub(crate) fn next_write_bytes(&self) -> (Vec<u8>, usize) {
        let mut iov = Vec::new();
        let fds = self.next_write(|s| iov.push(s)).map_or(0, |f| f.len());
        (iov.iter().flat_map(|s| s.iter().copied()).collect(), fds)
    }

    /// What is queued, in order (the first possibly written in part).
    pub fn items(&self) -> impl Iterator<Item = &OutItem> {
        self.items.iter()
    }

    /// The most slices [`Outbox::next_write`] gives now (two a message),
    /// so that its caller sizes their buffer once.
    #[inline]
    pub fn next_write_slices(&self) -> usize {
        2 * self.items.len().min(MAX_MESSAGES_PER_WRITE)
    }

    /// The slices of the next write, each given to `push` in order, and
    /// the fds to attach to it. A message carrying fds starts a write of its own, so
    /// its fds ride on its first byte; up to [`MAX_MESSAGES_PER_WRITE`]
    /// messages go in one.
    #[inline]
    pub fn next_write<'a>(
        &'a self,
        mut push: impl FnMut(IoSlice<'a>),
    ) -> Option<&'a Arc<Vec<PassedFd>>> {
        let mut fds = None;
        for (i, item) in self.items.iter().take(MAX_MESSAGES_PER_WRITE).enumerate() {
            let has_fds = item.fd_count() > 0;
            if i > 0 && has_fds {
                break;
            }
            let skip = if i == 0 { self.offset } else { 0 };
            if i == 0 && skip == 0 && has_fds {
                fds = item.fds.as_ref();
            }
            push_from(&mut push, &item.header, &item.body, skip);
        }
        fds
    }

    /// Write until empty: `write` makes one write of [`Outbox::next_write`]'s
    /// slices and says how much the socket took, or None when it takes
    /// nothing more for now. Ok(true) when the box is empty. The first
    /// write was made ahead when `written_ahead` gives its result
    /// ([`Outbox::write_ahead`]): only its counts move here, as `advance`
    /// would have moved them, and the writes go on from there.
    #[inline]
    pub fn flush<E>(
        &mut self,
        written_ahead: Option<Result<Option<usize>, E>>,
        mut write: impl FnMut(&Outbox) -> Result<Option<usize>, E>,
    ) -> Result<bool, E> {
        // Checked in every build: a result taken for a write of its own
        // would send bytes twice, a write left unsettled would keep its
        // counts for good.
        let ahead = self.ahead.take();
        assert_eq!(
            ahead.is_some(),
            written_ahead.is_some(),
            "a write made ahead and its result go together"
        );
        if let (Some(taken), Some(result)) = (ahead, written_ahead) {
            self.bytes -= taken.bytes;
            self.fds -= taken.fds;
            if !matches!(result?, Some(written) if written > 0) {
                return Ok(false);
            }
        }
        while !self.is_empty() {
            match write(self)? {
                // A write that took nothing would take nothing again: wait
                // for the socket instead of spinning.
                Some(written) if written > 0 => {
                    self.advance(written);
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The first write of the next [`Outbox::flush`], made ahead (on a
    /// worker thread, from an outbox lent out of its queue): what the
    /// socket took leaves the items here, but the counts still count it
    /// until that flush, given this write's result as `written_ahead`, settles
    /// them. So the queue weighs what it weighed before the write for
    /// every judgement made before its turn, as when the write is made
    /// in place. Returns what `write` said.
    #[inline]
    pub fn write_ahead<E>(
        &mut self,
        write: impl FnOnce(&Outbox) -> Result<Option<usize>, E>,
    ) -> Result<Option<usize>, E> {
        // Checked in every build: a second would leave the first unsettled,
        // its counts in the tally for good.
        assert!(self.ahead.is_none(), "two writes made ahead");
        let took = write(self);
        let (bytes, fds) = (self.bytes, self.fds);
        if let Ok(Some(written)) = took {
            self.advance(written);
        }
        // Set also when the write failed: the flush's first write is this
        // one, whose error it returns.
        self.ahead = Some(Unsettled {
            bytes: bytes - self.bytes,
            fds: fds - self.fds,
        });
        (self.bytes, self.fds) = (bytes, fds);
        took
    }

    /// The socket took `written` bytes of the next write: they leave,
    /// with the fds of each message written to its end.
    #[inline]
    fn advance(&mut self, mut written: usize) {
        while written > 0 {
            let Some(front) = self.items.front() else {
                break;
            };
            let left = front.len() - self.offset;
            if written < left {
                self.offset += written;
                self.bytes -= written;
                break;
            }
            written -= left;
            self.bytes -= left;
            self.fds -= front.fd_count();
            self.offset = 0;
            if let Some(OutItem { header, body, fds }) = self.items.pop_front() {
                // Dropped field by field: with `advance` inlined in two
                // places, the compiler kept the whole item's drop out of
                // line, a call per message written (callgrind, fan-out).
                drop((header, body, fds));
            }
        }
    }
}

/// Append the parts of header ++ body after the first `skip` bytes.
fn push_from<'a>(
    push: &mut impl FnMut(IoSlice<'a>),
    header: &'a [u8],
    body: &'a [u8],
    skip: usize,
) {
    if skip < header.len() {
        push(IoSlice::new(&header[skip..]));
        if !body.is_empty() {
            push(IoSlice::new(body));
        }
    } else if skip - header.len() < body.len() {
        push(IoSlice::new(&body[skip - header.len()..]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::disallowed_methods)] // a test's own descriptors
    fn item(header: &'static [u8], body: &'static [u8], nfds: usize) -> OutItem {
        let fds = (0..nfds)
            .map(|_| {
                PassedFd::from(std::os::fd::OwnedFd::from(
                    std::fs::File::open("/dev/null").unwrap(),
                ))
            })
            .collect::<Vec<_>>();
        OutItem {
            header: Bytes::from_static(header),
            body: Bytes::from_static(body),
            fds: (nfds > 0).then(|| Arc::new(fds)),
        }
    }

    /// The counts are what the items still hold.
    fn assert_counts_match(outbox: &Outbox) {
        let bytes: usize = outbox.items().map(OutItem::len).sum::<usize>() - outbox.offset;
        let fds: usize = outbox.items().map(OutItem::fd_count).sum();
        assert_eq!((outbox.bytes(), outbox.fds()), (bytes, fds));
    }

    #[test]
    fn a_write_that_takes_nothing_waits_for_the_socket_instead_of_spinning() {
        let mut o = Outbox::default();
        o.push(item(b"head", b"body", 0));
        let mut writes = 0;
        let flushed = o.flush(None, |_| {
            writes += 1;
            assert!(writes < 3, "flush spins on a write of 0 bytes");
            Ok::<_, ()>(Some(0))
        });
        assert_eq!(flushed, Ok(false));
        assert_eq!(o.bytes(), 8);
    }

    /// `o.advance(written)`, and the bytes and fds that left.
    fn advanced(o: &mut Outbox, written: usize) -> (usize, usize) {
        let (bytes, fds) = (o.bytes(), o.fds());
        o.advance(written);
        (bytes - o.bytes(), fds - o.fds())
    }

    /// Three messages queued, the second with two fds, the last with
    /// `last_fds`.
    fn three_queued(last_fds: usize) -> Outbox {
        let mut o = Outbox::default();
        o.push(item(b"head", b"body", 0));
        o.push(item(b"fds!", b"", 2));
        o.push(item(b"last", b"one", last_fds));
        o
    }

    /// Flush `o` through a socket that takes at most `takes` bytes a
    /// write, the first write's result being `first` if given (a write
    /// made ahead); what the socket got is appended to `sent`.
    fn flush_through(
        o: &mut Outbox,
        takes: usize,
        first: Option<Result<Option<usize>, ()>>,
        sent: &mut Vec<u8>,
    ) -> Result<bool, ()> {
        let mut writes = 0;
        o.flush(first, |o| {
            writes += 1;
            assert!(writes < 1000, "the flush does not advance");
            take(o, takes, sent)
        })
    }

    /// One write of `o`'s next slices through a socket that takes at most
    /// `takes` bytes, appended to `sent`.
    fn take(o: &Outbox, takes: usize, sent: &mut Vec<u8>) -> Result<Option<usize>, ()> {
        let (bytes, _) = o.next_write_bytes();
        let n = takes.min(bytes.len());
        sent.extend_from_slice(&bytes[..n]);
        Ok(Some(n))
    }

    #[test]
    fn a_flush_after_a_write_made_ahead_sends_what_a_flush_alone_sends() {
        for takes in [1, 3, 7, 10, 100] {
            let mut alone = three_queued(1);
            let mut sent_alone = Vec::new();
            assert_eq!(
                flush_through(&mut alone, takes, None, &mut sent_alone),
                Ok(true)
            );

            let mut ahead = three_queued(1);
            let mut sent = Vec::new();
            let first = ahead.write_ahead(|o| take(o, takes, &mut sent));
            // Its counts wait for the flush, which settles them.
            assert_eq!((ahead.bytes(), ahead.fds()), (19, 3), "takes {takes}");
            assert!(ahead.written_ahead());
            assert_eq!(
                flush_through(&mut ahead, takes, Some(first), &mut sent),
                Ok(true)
            );
            assert_eq!(sent, sent_alone, "takes {takes}");
            assert_eq!((ahead.bytes(), ahead.fds()), (0, 0));
            assert!(!ahead.written_ahead());
        }
    }

    #[test]
    fn counts_move_with_each_push_and_write() {
        let mut o = three_queued(0);
        assert_eq!((o.bytes(), o.fds()), (19, 2));
        assert_counts_match(&o);
        // The fds start a write of their own.
        assert_eq!(o.next_write_bytes(), (b"headbody".to_vec(), 0));
        // Part of the first item: bytes go, nothing else does.
        assert_eq!(advanced(&mut o, 3), (3, 0));
        assert_counts_match(&o);
        assert_eq!(o.next_write_bytes(), (b"dbody".to_vec(), 0));
        // The rest of it.
        assert_eq!(advanced(&mut o, 5), (5, 0));
        assert_counts_match(&o);
        // They go with the first byte of their message; what follows
        // without fds joins the write.
        assert_eq!(o.next_write_bytes(), (b"fds!lastone".to_vec(), 2));
        // The fds leave once their message is written to its end.
        assert_eq!(advanced(&mut o, 1), (1, 0));
        assert_eq!(o.fds(), 2);
        assert_eq!(
            o.next_write_bytes(),
            (b"ds!lastone".to_vec(), 0),
            "sent already"
        );
        assert_eq!(advanced(&mut o, 10), (10, 2));
        assert!(o.is_empty());
        assert_eq!((o.bytes(), o.fds()), (0, 0));
        assert_counts_match(&o);
    }

    /// `o` written out and read back as across a restart (the fds as
    /// new descriptors, as the new image's table would hold them).
    #[allow(clippy::disallowed_methods)] // a test's own clock and descriptors
    /// An error is what the restart's log would say.
    fn handed_over(o: &Outbox) -> Result<Outbox, String> {
        use crate::handover::tests::as_handed_over;
        use crate::handover::{explained, restoring, saving, Clock};
        let clock = Clock {
            instant: std::time::Instant::now(),
            monotonic_ns: 1_000_000_000,
        };
        let (bytes, saved) = saving(clock, || postcard::to_stdvec(o).unwrap());
        let (fds, buffers) = as_handed_over(&saved);
        restoring(clock, fds, buffers, || {
            postcard::from_bytes(&bytes).map_err(explained)
        })
        .0
    }

    #[test]
    fn a_restored_outbox_counts_again_what_it_holds() {
        let mut o = three_queued(1);
        // Written halfway into the first message.
        o.advance(3);
        assert_eq!((o.bytes(), o.fds()), (16, 3));
        let r = handed_over(&o).unwrap();
        assert_eq!((r.bytes(), r.fds()), (16, 3));
        assert_counts_match(&r);
        assert_eq!(r.next_write_bytes(), o.next_write_bytes());
        // And it goes on as the original would.
        let mut r = r;
        assert_eq!(advanced(&mut r, 5), (5, 0));
        assert_eq!(advanced(&mut r, 4), (4, 2));
        assert_eq!(advanced(&mut r, 7), (7, 1));
        assert!(r.is_empty());
        // Empty, and whole.
        let r = handed_over(&Outbox::default()).unwrap();
        assert_eq!((r.bytes(), r.fds(), r.is_empty()), (0, 0, true));
    }

    #[test]
    fn a_handed_over_offset_past_the_first_message_is_refused() {
        let mut o = Outbox::default();
        o.push(item(b"head", b"body", 0));
        o.advance(3);
        o.offset = 8;
        let past_the_end = "a queue written past the end of its first message";
        assert!(handed_over(&o).unwrap_err().ends_with(past_the_end));
        let empty = Outbox {
            offset: 1,
            ..Outbox::default()
        };
        assert!(handed_over(&empty).unwrap_err().ends_with(past_the_end));
        // (Built by hand: `push` refuses one in debug builds.)
        let with_an_empty_item = Outbox {
            items: VecDeque::from([item(b"", b"", 0)]),
            ..Outbox::default()
        };
        let error = handed_over(&with_an_empty_item).unwrap_err();
        assert!(error.ends_with("an empty message in a queue"), "{error}");
    }

    #[test]
    fn a_write_takes_many_messages_up_to_the_bound() {
        let mut o = Outbox::default();
        for _ in 0..MAX_MESSAGES_PER_WRITE + 10 {
            o.push(item(b"h", b"b", 0));
        }
        let mut iov = Vec::new();
        o.next_write(|s| iov.push(s));
        assert_eq!(iov.len(), 2 * MAX_MESSAGES_PER_WRITE);
        assert_eq!(o.next_write_slices(), iov.len());
        assert_eq!(advanced(&mut o, 2 * MAX_MESSAGES_PER_WRITE), (512, 0));
        assert_eq!(o.items().count(), 10);
        assert_counts_match(&o);
        let mut iov = Vec::new();
        o.next_write(|s| iov.push(s));
        assert_eq!(o.next_write_slices(), iov.len());
    }
}
