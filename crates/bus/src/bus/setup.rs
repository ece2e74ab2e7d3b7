//! Making a bus, and what the daemon sets on it after: limits, SELinux,
//! the activatable names, the activation environment it reads back.
//!
//! Owns: nothing of its own; it writes the options (`BusOptions`) and
//! the nouns' initial state. May touch: every noun once, in [`Bus::new`];
//! afterwards only the options, and the subscriptions and outgoing
//! messages to announce ActivatableServicesChanged.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use quickbus_wire::MessageBuilder;

use crate::activation::Activations;
use crate::app_filter::view::AppViews;
use crate::overflow::Queues;
use crate::peers::Peers;
use crate::policy::{CompiledPolicy, PolicyConfig};
use crate::registry::NameRegistry;
use crate::replies::PendingReplies;
use crate::stats::Peaks;
use crate::subscriptions::{Monitors, Subscriptions};
use crate::traffic::Traffic;
use crate::{Action, Bus, BusOptions, ConnId, BUS_INTERFACE, BUS_PATH};

use super::Routing;

impl Bus {
    /// A bus deserialized after a restart in place (docs/restart.md) is
    /// made whole: every connection's policy rules are resolved again
    /// from the compiled policy (they are shared, so they do not cross),
    /// and `mediator` (the daemon's, opened anew) is installed; each
    /// filtered connection shares its container instance's filter again
    /// (each crossed with a copy of its own).
    pub fn restored(&mut self, mediator: Option<Box<dyn crate::mac::Mediator>>) {
        let config = self.policy.config().clone();
        self.set_policy(config);
        self.set_mediator(mediator);
        for (&conn, view) in self.app_views.iter_mut() {
            let instance_filter = self
                .containers
                .instance_of(conn)
                .and_then(|path| self.containers.get(path))
                .and_then(|instance| instance.filter.as_ref());
            if let Some(filter) = instance_filter {
                view.share_filter(filter);
            }
        }
    }

    /// A bus deserialized after a restart in place, checked before it
    /// serves: the registered connections, the container instances and
    /// the activations' waiters and deadlines are counted again and the
    /// counters of ids, unique names and instance paths checked
    /// (`Peers::recount`, `Containers::recount`, `Activations::recount`),
    /// the names' queues checked against what each connection holds
    /// (`NameRegistry::check_handed_over`), the pending calls' indexes
    /// built again from the calls (`PendingReplies::check_handed_over`),
    /// the container instances' connections checked against the
    /// connections' instances (`Containers::check_connections`),
    /// each user's tally of queued bytes and fds, which crossed beside
    /// the queues, is counted again from them, and the held senders are
    /// found again from their holds. Returns the uids whose tallies were
    /// wrong (now right; the daemon logs them), or why the state cannot
    /// be served (a connection of a user with no tally or counted in
    /// another uid's, an id, a unique name or a path given twice, a name
    /// queue and the names held that disagree, a call or a container
    /// connection naming a connection that is not on the bus: the
    /// restart is refused and the previous image serves on).
    pub fn check_handed_over(&mut self) -> Result<Vec<u32>, String> {
        self.conns.recount()?;
        self.check_unique_owners()?;
        self.registry
            .check_handed_over(|id| self.may_own_names(id))?;
        let conns = &self.conns;
        let on_bus = |id: ConnId| conns.contains_key(&id);
        self.replies.check_handed_over(on_bus)?;
        self.containers.recount()?;
        self.containers.check_connections(on_bus)?;
        self.activations.recount();
        let queues = self
            .conns
            .iter()
            .map(|(&id, c)| (id, c.creds().uid, &c.queue));
        self.queues.recount(queues)
    }

    /// Whether `id` may own names: past Hello (it has its unique name)
    /// and not a monitor (which let go of its names).
    fn may_own_names(&self, id: ConnId) -> bool {
        self.conns.get(&id).is_some_and(|c| c.unique().is_some()) && !self.monitors.is_monitor(id)
    }

    /// After a restart in place: each unique name is owned, in the
    /// registry, by the connection it names (a monitor's by none: it let
    /// go of its names), and the registry holds no other. A message to
    /// the name goes to the registry's owner, while the replies and the
    /// sender field of the connection's own name it: one connection could
    /// otherwise be called as another, or answer for it.
    fn check_unique_owners(&self) -> Result<(), String> {
        let mut owned = 0;
        for (&id, conn) in self.conns.iter() {
            let Some(unique) = conn.unique() else {
                continue;
            };
            let expected = self.may_own_names(id).then_some(id);
            owned += usize::from(expected.is_some());
            let owner = self.registry.owner(unique);
            if owner != expected {
                return Err(format!(
                    "the unique name {unique} of connection {} is owned by {owner:?}",
                    id.0
                ));
            }
        }
        let in_registry = self.registry.names().filter(|n| n.starts_with(':')).count();
        if in_registry != owned {
            return Err(format!(
                "{in_registry} unique names have owners, for {owned} connections past Hello \
                 that are not monitors"
            ));
        }
        Ok(())
    }

    /// A bus deserialized after a restart in place, checked against the
    /// daemon's connections it crossed with: `daemon` gives each one's
    /// id, whether it has authenticated and whether it said Hello (see
    /// `Peers::check_daemon_connections`). Returns why the two cannot be
    /// served together.
    pub fn check_daemon_connections(
        &self,
        daemon: impl IntoIterator<Item = (ConnId, bool, bool)>,
    ) -> Result<(), String> {
        self.conns.check_daemon_connections(daemon)
    }

    pub fn new(opts: BusOptions) -> Bus {
        Bus {
            policy: CompiledPolicy::new(PolicyConfig::allow_all()),
            opts,
            conns: Peers::default(),
            serial: 0,
            registry: NameRegistry::new(),
            replies: PendingReplies::new(),
            subs: Subscriptions::new(),
            monitors: Monitors::default(),
            selinux_enabled: false,
            own_security_label: None,
            awaiting_pidfd: None,
            awaiting_listener: None,
            containers: Default::default(),
            peaks: Peaks::default(),
            traffic: Traffic::default(),
            activations: Activations::default(),
            mac: None,
            empty_fds: Arc::new(Vec::new()),
            spare_recipients: Vec::new(),
            queues: Queues::default(),
            lent: Vec::new(),
            app_views: AppViews::default(),
        }
    }

    /// Whether SELinux is enabled, and the bus process's own label: with
    /// SELinux, GetConnectionSELinuxSecurityContext returns labels.
    pub fn set_selinux(&mut self, enabled: bool, own_label: Option<Vec<u8>>) {
        self.selinux_enabled = enabled;
        self.own_security_label = own_label;
    }

    /// The environment UpdateActivationEnvironment set, for activated
    /// services.
    pub fn activation_environment(&self) -> &HashMap<String, String> {
        self.activations.environment()
    }

    /// Replace the list of activatable names (after a reload, which
    /// re-read the service directories). The ActivatableServicesChanged
    /// signal goes to every connection whose rules match it, changed or
    /// not: dbus-daemon 1.14 sends it on every reload (the differential
    /// harness's driver/ReloadConfig scenario shows it).
    pub fn set_activatable_names(
        &mut self,
        mut names: Vec<String>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let routing = Routing::by_bus(now);
        names.sort_unstable();
        self.opts.activatable_names = names;
        let builder = MessageBuilder::signal(BUS_PATH, BUS_INTERFACE, "ActivatableServicesChanged");
        self.broadcast_from_bus(builder, routing, out);
    }

    /// New limits (a reload); existing names, rules and pending calls are
    /// kept even where they now exceed them.
    pub fn set_limits(&mut self, limits: crate::Limits) {
        self.opts.limits = limits;
    }

    pub fn options(&self) -> &BusOptions {
        &self.opts
    }
}
