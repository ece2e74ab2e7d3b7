//! The tripwire for the handover's layout (docs/restart.md, "The format
//! and its version"). postcard writes fields by position and variants by
//! index, with no names, so a binary reading another binary's state in a
//! different layout reads garbage or fails, and only `HANDOVER_VERSION`
//! keeps two such binaries apart. The test below traces the shape of
//! everything the handover serializes (serde-reflection: every struct,
//! enum and newtype reachable from [`Restored`], its fields by name and
//! order with their types, its variants with their indices), hashes it,
//! and pins the digest together with the version: a layout changed
//! without a bump fails it.
//!
//! How the trace reaches everything:
//!
//! - It traces deserialization: the tracer makes up each value a
//!   `Deserialize` asks for, inside `quickbus_bus::handover::layout::
//!   tracing`, where every fd read is a copy of `/dev/null` and every
//!   instant reads on the clock; the `with` modules of the handover
//!   (fds, instants, shared bytes and fd lists, `within_an_event`,
//!   `put_back_before_a_handover`) are traced as the format they read.
//! - Where a `Deserialize` checks what it reads, the tracer's made-up
//!   value would fail, so [`samples`] gives one that passes: a message's
//!   bytes (a `Slice` of a buffer that parses), a container instance's
//!   metadata (`handover::layout::Metadata`), how many times a match rule
//!   was installed (`handover::layout::MatchRuleCount`), a per-app
//!   filter's options (`ProxyOptions`). A new check of that kind fails the trace with its
//!   error; give a sample here.
//! - The tracer explores one variant of an enum per pass, and an enum
//!   held in an `Option`, a list or a map is met in the first pass only,
//!   so every enum is traced on its own: the bus's in
//!   `quickbus_bus::handover::layout::each_enum`, the daemon's in
//!   [`handover_layout`]. An enum missing there fails the test (as
//!   missing variants, or as one traced in part).
//! - The tracer tells types by their name without the module: two
//!   serialized types of one name fail the trace unless their layouts
//!   agree, so such a type has a serde name of its own
//!   (`#[serde(rename)]`, which postcard never writes).
//!
//! What it cannot see: the serializing side. Each `with` module and
//! hand-written `Serialize` here writes what its `Deserialize` reads
//! (their round-trip tests say so), and [`super::Handover`], the borrowed
//! twin of `Restored` that the old image writes, must keep the same
//! fields in the same order (every restart in the e2e tests reads one
//! with the other). Nor the memfd's header before the payload
//! (`format.rs`), which has its own tests.

use std::os::fd::OwnedFd;

use bytes::Bytes;
use quickbus_bus::app_filter::AppFilter;
use quickbus_bus::handover::layout::{tracing, MatchRuleCount, Metadata, TypeVisitor};
use quickbus_wire::{Message, MessageBuilder, Value};
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_reflection::{ContainerFormat, Registry, Samples, Tracer, TracerConfig};
use sha1::{Digest, Sha1};

use super::format::{clock_now, Restored};
use super::HANDOVER_VERSION;

/// The layout `HANDOVER_VERSION` names: the version and the digest of the
/// traced layout, recorded together. (The digest changed once within
/// version 8: a match rule's count became the newtype `RuleCount`, which
/// the trace sees and postcard does not write, so the bytes, and with
/// them the version, stayed the same.)
const RECORDED: (u32, &str) = (8, "a7451ec24fdca378bb8f4c39a51eee9862f4afc4");

#[test]
fn the_handover_version_names_the_handover_layout() {
    let registry = handover_layout();
    let digest = digest(&registry);
    let listing: String = registry
        .iter()
        .map(|(name, format)| format!("{name}: {format:?}\n"))
        .collect();
    assert_eq!(
        (HANDOVER_VERSION, digest.as_str()),
        RECORDED,
        "the handover's layout is not the one recorded for this HANDOVER_VERSION: \
         bump HANDOVER_VERSION and record the new digest (RECORDED in \
         crates/daemon/src/restart/layout.rs). The layout traced:\n{listing}"
    );
}

/// Every container (struct, enum, newtype) reachable from [`Restored`],
/// by name: its fields in order with their formats, its variants with
/// their indices.
fn handover_layout() -> Registry {
    // Samples of structs too: the message's sample is a `Slice`.
    let mut tracer = Tracer::new(TracerConfig::default().record_samples_for_structs(true));
    let (samples, buffers) = samples(&mut tracer);
    let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let mut traced = Traced {
        tracer,
        samples: &samples,
    };
    tracing(clock_now(), fd, buffers, || {
        traced.visit::<Restored>();
        quickbus_bus::handover::layout::each_enum(&mut traced);
        traced.visit::<crate::auth::AuthIdentity>();
        traced.visit::<crate::auth::State>();
        traced.visit::<crate::config::PolicyScope>();
        traced.visit::<crate::handover_fields::Socket>();
        traced.visit::<crate::server::Phase>();
    });
    let registry = traced.tracer.registry().unwrap_or_else(|e| {
        panic!(
            "tracing the handover: {e:?} (an enum missing: visit it in `each_enum`, \
             the bus's, or in `handover_layout`, the daemon's)\n{}",
            e.explanation()
        )
    });
    // An enum traced only from the handover's top shows the variant the
    // tracer met first, under an index it has not found yet.
    for (name, format) in &registry {
        if let ContainerFormat::Enum(variants) = format {
            assert!(
                variants.keys().all(|&index| index < u32::MAX / 2),
                "the enum {name} is traced in part: visit it in `each_enum` (the bus's) \
                 or in `handover_layout` (the daemon's)"
            );
        }
    }
    registry
}

/// A tracer of the types it visits.
struct Traced<'a> {
    tracer: Tracer,
    samples: &'a Samples,
}

impl TypeVisitor for Traced<'_> {
    fn visit<T: DeserializeOwned>(&mut self) {
        self.tracer
            .trace_type::<T>(self.samples)
            .unwrap_or_else(|e| panic!("tracing the handover: {e:?}\n{}", e.explanation()));
    }
}

/// Values the tracer cannot make up, where a field is checked as it is
/// read, and the buffers their messages lie in.
fn samples(tracer: &mut Tracer) -> (Samples, Vec<Bytes>) {
    let mut samples = Samples::new();
    // A message's bytes cross as a `Slice` of a buffer; one that parses.
    struct MessageSlice(Message);
    impl Serialize for MessageSlice {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            quickbus_bus::handover::shared_message::serialize(&self.0, s)
        }
    }
    let message = Message::parse(MessageBuilder::method_return(1).build(1).unwrap()).unwrap();
    let (traced, saved) = quickbus_bus::handover::saving(clock_now(), || {
        tracer.trace_value(&mut samples, &MessageSlice(message))
    });
    traced.unwrap();
    // A container instance's metadata crosses as a message too.
    tracer
        .trace_value(&mut samples, &Metadata(Value::String(String::new())))
        .unwrap();
    // A match rule crosses with how many times it was installed, never 0.
    tracer.trace_value(&mut samples, &MatchRuleCount).unwrap();
    // A per-app filter crosses as options that compile.
    let filter = AppFilter::from_proxy_options(&["--talk=org.example.App"]).unwrap();
    tracer.trace_value(&mut samples, &filter).unwrap();
    (samples, saved.buffers)
}

/// The SHA-1 of the layout, in hex.
fn digest(registry: &Registry) -> String {
    let bytes = postcard::to_stdvec(registry).unwrap();
    Sha1::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
