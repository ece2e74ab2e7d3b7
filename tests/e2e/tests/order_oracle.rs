//! The bus's one total order, checked against a single-threaded oracle
//! (issue 27): many senders and receivers, each on its own thread, all at
//! once; a monitor records every message in the order the bus routed it;
//! the oracle replays that record and says what each client must have
//! got, and each client's list must be exactly that, in order and count.
//!
//! Senders mix broadcast signals, signals and method calls addressed to
//! one receiver, and RequestName / ReleaseName of a name of their own and
//! of one they share (so the driver's NameOwnerChanged, NameAcquired and
//! NameLost, some caused by another sender's release, are in the mix).
//! Receivers answer the calls, and some add and remove a rule while the
//! traffic runs. It is also the stress run of the test command: bounded by
//! counts (each sender ends with a Done signal, every receiver and the
//! monitor stop at the last one), with `TIMEOUT` only as the bound on a
//! failure; nothing here asserts on time.
//!
//! What the record is taken to mean: the bus routed the messages in this
//! one order, each message to every receiver in it (so a receiver gets a
//! sender's messages in the order sent, and a signal before the call or
//! reply its sender sent later), and a match rule applies to everything
//! routed after its AddMatch call and before its RemoveMatch call.

#[path = "order_oracle/client.rs"]
mod client;
#[path = "order_oracle/oracle.rs"]
mod oracle;

use std::sync::Barrier;
use std::thread;

use quickbus_client::{bus_call, Connection, MessageBuilder, MessageType, Value};
use quickbus_e2e::{become_monitor, skip, Bus, Listen};

use client::Client;
use oracle::{Rule, Seen, DRIVER};

/// More connections on each side than the daemon's threads (4 in the
/// second test), so that threads share connections.
const SENDERS: usize = 8;
const RECEIVERS: usize = 8;
/// Rounds per sender: few enough that no receiver's queue gets near a
/// flow-control bound (about 22,000 routed messages in all), a multiple of
/// 20 so that every name a sender takes it gives back.
const ROUNDS: u32 = 1000;
const INTERFACE: &str = "org.example.Order";
const PATH: &str = "/org/example/Order";
const SHARED_NAME: &str = "org.example.Order.Shared";
/// Odd receivers add a rule whenever the messages they got reach 100 more
/// than a multiple of 400, and remove it at 300 more, while the senders
/// are still sending.
const EXTRA_RULE_PERIOD: usize = 400;
const EXTRA_RULE_ADDED: usize = 100;
const EXTRA_RULE_REMOVED: usize = 300;

#[test]
fn every_client_gets_exactly_what_the_bus_order_says() {
    order_matches_the_oracle("");
}

#[test]
fn every_client_gets_exactly_what_the_bus_order_says_with_four_threads() {
    // The limit is quickbus's own: dbus-daemon refuses a file that names it.
    if skip::quickbus_only("the threads limit") {
        return;
    }
    order_matches_the_oracle(r#"<limit name="threads">4</limit>"#);
}

fn own_name(sender: usize) -> String {
    format!("{INTERFACE}.S{sender}")
}

fn signal(member: &str, tag: &str, sender: usize, round: u32) -> MessageBuilder {
    MessageBuilder::signal(PATH, INTERFACE, member).body(body(tag, sender, round))
}

fn body(tag: &str, sender: usize, round: u32) -> Vec<Value> {
    vec![
        Value::String(tag.into()),
        Value::Uint32(sender as u32),
        Value::Uint32(round),
    ]
}

/// RequestName (flags 0: queue if owned) or ReleaseName; the bus's answer.
fn name_call(client: &mut Client, member: &str, name: &str) -> u32 {
    let mut args = vec![Value::String(name.into())];
    if member == "RequestName" {
        args.push(Value::Uint32(0));
    }
    match client
        .call(bus_call(member).body(args))
        .body_values()
        .as_deref()
    {
        Ok([Value::Uint32(answer)]) => *answer,
        other => panic!("{member} {name}: expected one u32, got {other:?}"),
    }
}

/// One sender's rounds: a broadcast Tick every round, and in some rounds a
/// Poke signal or an Echo call to one receiver, and its names taken and
/// given back; a Done signal at the end.
fn run_sender(index: usize, client: &mut Client, receivers: &[String], start: &Barrier) {
    let own = own_name(index);
    start.wait();
    for round in 0..ROUNDS {
        let tag = if round % 2 == 0 { "even" } else { "odd" };
        client.send(signal("Tick", tag, index, round));
        if round % 4 == 1 {
            let to = &receivers[(index + round as usize) % receivers.len()];
            client.send(signal("Poke", "poke", index, round).destination(to));
        }
        if round % 5 == 2 {
            let to = &receivers[(3 * index + round as usize) % receivers.len()];
            let echo = MessageBuilder::method_call(PATH, "Echo")
                .interface(INTERFACE)
                .destination(to)
                .body(body("echo", index, round));
            let reply = client.call(echo);
            assert_eq!(
                reply.sender(),
                Some(to.as_str()),
                "an Echo answered by another"
            );
            assert_eq!(
                reply.body_values().expect("the Echo reply's body"),
                body("echo", index, round),
                "{to} echoed something else to sender {index}"
            );
        }
        match round % 10 {
            3 => assert_eq!(name_call(client, "RequestName", &own), 1, "{own}"),
            8 => assert_eq!(name_call(client, "ReleaseName", &own), 1, "{own}"),
            _ => {}
        }
        match round % 20 {
            // Owner or queued, whichever the others left it.
            5 => assert!(matches!(
                name_call(client, "RequestName", SHARED_NAME),
                1 | 2
            )),
            15 => assert_eq!(name_call(client, "ReleaseName", SHARED_NAME), 1),
            _ => {}
        }
    }
    client.send(signal("Done", "done", index, ROUNDS));
}

fn is_done(message: &Seen) -> bool {
    message.kind == MessageType::Signal
        && message.interface.as_deref() == Some(INTERFACE)
        && message.member.as_deref() == Some("Done")
}

/// The rules of receiver `index`: each has a rule for the Done signals,
/// and rules that overlap it or each other (a broadcast that matches
/// several comes once), select by sender or arg0, or select the driver's
/// NameOwnerChanged. The last rule of an odd receiver is its extra one,
/// added and removed during the traffic.
fn rules_of(index: usize, senders: &[String]) -> Vec<Rule> {
    let rule =
        |sender: Option<&str>, interface: &str, member: Option<&str>, arg0: Option<&str>| Rule {
            sender: sender.map(str::to_owned),
            interface: interface.to_owned(),
            member: member.map(str::to_owned),
            arg0: arg0.map(str::to_owned),
        };
    let watched = &senders[index % senders.len()];
    let watched_name = own_name(index % senders.len());
    let mut rules = vec![rule(None, INTERFACE, Some("Done"), None)];
    rules.push(match index % 4 {
        0 => rule(None, INTERFACE, Some("Tick"), None),
        1 => rule(None, INTERFACE, Some("Tick"), Some("even")),
        2 => rule(None, INTERFACE, None, None),
        _ => rule(Some(watched), INTERFACE, None, None),
    });
    let owner_changes = Some("NameOwnerChanged");
    rules.push(match index % 4 {
        0 | 2 => rule(Some(DRIVER), DRIVER, owner_changes, None),
        1 => rule(Some(DRIVER), DRIVER, owner_changes, Some(&watched_name)),
        _ => rule(Some(DRIVER), DRIVER, owner_changes, Some(SHARED_NAME)),
    });
    if index % 2 == 1 {
        let next = &senders[(index + 1) % senders.len()];
        rules.push(rule(Some(next), INTERFACE, Some("Tick"), None));
    }
    rules
}

fn match_call(member: &str, rule: &Rule) -> MessageBuilder {
    bus_call(member).body(vec![Value::String(rule.text())])
}

/// One receiver: adds its rules, then receives until every sender's Done
/// came, answering the Echo calls and (odd ones) changing a rule without
/// waiting for the bus's answer.
fn run_receiver(index: usize, client: &mut Client, rules: &[Rule], start: &Barrier) {
    let (initial, extra) = if index % 2 == 1 {
        (&rules[..rules.len() - 1], rules.last())
    } else {
        (rules, None)
    };
    for rule in initial {
        client.call(match_call("AddMatch", rule));
    }
    start.wait();
    let mut done = 0;
    while done < SENDERS {
        let message = client.receive();
        let seen = client.last();
        assert_ne!(
            seen.member.as_deref(),
            Some("MessagesLost"),
            "receiver {index} lost messages to flow control: lower ROUNDS"
        );
        if seen.reply_serial.is_some() {
            assert_eq!(
                seen.kind,
                MessageType::MethodReturn,
                "receiver {index}'s call failed"
            );
        }
        if is_done(seen) {
            done += 1;
        }
        if seen.kind == MessageType::MethodCall && seen.member.as_deref() == Some("Echo") {
            let reply = MessageBuilder::method_return(seen.serial)
                .destination(seen.sender.clone())
                .body(message.body_values().expect("the Echo's body"));
            client.send(reply);
        }
        if let Some(rule) = extra {
            match client.got.len() % EXTRA_RULE_PERIOD {
                EXTRA_RULE_ADDED => _ = client.send(match_call("AddMatch", rule)),
                EXTRA_RULE_REMOVED => _ = client.send(match_call("RemoveMatch", rule)),
                _ => {}
            }
        }
    }
}

/// Everything the bus routes, in its order, up to the last sender's Done.
fn record_until_done(mut monitor: Connection) -> Vec<Seen> {
    let mut record = Vec::new();
    let mut done = 0;
    while done < SENDERS {
        let (message, _) = monitor.receive().unwrap_or_else(|e| {
            panic!(
                "the monitor stopped after {} messages, {done} Done: {e}",
                record.len()
            )
        });
        let seen = Seen::of(&message);
        if is_done(&seen) {
            done += 1;
        }
        record.push(seen);
    }
    record
}

/// How much the run did (`--nocapture`): the shared name must have gone
/// from one owner to another for the driver's hand-overs to be in the mix.
fn describe<'a>(record: &[Seen], clients: impl Iterator<Item = &'a Client>) {
    let handed_over = record
        .iter()
        .filter(|m| m.member.as_deref() == Some("NameOwnerChanged"))
        .filter(|m| !m.args.contains(&Value::String(String::new())))
        .count();
    let got: usize = clients.map(|c| c.got.len()).sum();
    eprintln!(
        "{} messages routed; the clients got {got}; {handed_over} NameOwnerChanged from one owner to another",
        record.len()
    );
}

/// A thread's result, or its panic passed on as it was.
fn join<T>(handle: thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn order_matches_the_oracle(extra_config: &str) {
    let bus = Bus::start_with_config(Listen::UnixPath, extra_config);
    // The monitor first, so that the record holds every other connection's
    // messages from its Hello on.
    let mut monitor = bus.connect();
    become_monitor(&mut monitor, &[]);
    let mut senders: Vec<Client> = (0..SENDERS).map(|_| Client::new(bus.connect())).collect();
    let mut receivers: Vec<Client> = (0..RECEIVERS).map(|_| Client::new(bus.connect())).collect();
    let sender_names: Vec<String> = senders.iter().map(|c| c.name.clone()).collect();
    let receiver_names: Vec<String> = receivers.iter().map(|c| c.name.clone()).collect();
    let rules: Vec<Vec<Rule>> = (0..RECEIVERS).map(|r| rules_of(r, &sender_names)).collect();

    let start = Barrier::new(SENDERS + RECEIVERS);
    let record = thread::scope(|scope| {
        let record = scope.spawn(|| record_until_done(monitor));
        let mut running = Vec::new();
        for (i, client) in senders.iter_mut().enumerate() {
            let (names, start) = (&receiver_names, &start);
            running.push(scope.spawn(move || run_sender(i, client, names, start)));
        }
        for (i, (client, rules)) in receivers.iter_mut().zip(&rules).enumerate() {
            let start = &start;
            running.push(scope.spawn(move || run_receiver(i, client, rules, start)));
        }
        running.into_iter().for_each(join);
        join(record)
    });
    describe(&record, senders.iter().chain(&receivers));
    check(&record, &mut senders, &receivers, &rules);
}

fn check(record: &[Seen], senders: &mut [Client], receivers: &[Client], rules: &[Vec<Rule>]) {
    assert!(
        !record
            .iter()
            .any(|m| m.member.as_deref() == Some("MessagesLost")),
        "the bus dropped messages to flow control: lower ROUNDS"
    );
    oracle::assert_per_sender_order(record);
    for sender in senders.iter_mut() {
        // Each message it sent is in the record once: same serials, same
        // order.
        let name = &sender.name.clone();
        assert_eq!(
            &oracle::serials_of(record, name),
            &sender.sent,
            "what the monitor saw of sender {name}"
        );
        let no_rules = oracle::Client { name, rules: &[] };
        let expected = oracle::expected(record, &no_rules);
        // The driver's NameLost after its last ReleaseName may still be on
        // its way; then one more call, whose reply must be the next thing
        // it gets.
        while sender.got.len() < expected.len() {
            sender.receive();
        }
        let ping = sender.send(bus_call("GetId"));
        sender.receive();
        let next = sender.last();
        assert_eq!(
            next.reply_serial,
            Some(ping),
            "sender {name} got more than the record says: {next:?}"
        );
        sender.got.pop();
        oracle::assert_same_list(&format!("sender {name}"), &sender.got, &expected);
    }
    for ((index, receiver), rules) in receivers.iter().enumerate().zip(rules) {
        let name = &receiver.name;
        // Its last calls (a RemoveMatch) may come after the last Done,
        // where the record stops.
        let recorded = oracle::serials_of(record, name);
        assert!(
            receiver.sent.starts_with(&recorded),
            "what the monitor saw of receiver {index} ({name}): {recorded:?}, not the start of {:?}",
            receiver.sent
        );
        let expected = oracle::expected(record, &oracle::Client { name, rules });
        // Exactly this list, in this order: so per receiver and per sender
        // the order is the bus's, and a sender's signal reaches a receiver
        // before that sender's later call (both are in the one record, the
        // signal first, and the receiver's list keeps the record's order).
        oracle::assert_same_list(
            &format!("receiver {index} ({name})"),
            &receiver.got,
            &expected,
        );
    }
}
