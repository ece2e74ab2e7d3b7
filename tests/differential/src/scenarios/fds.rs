//! Passing file descriptors: to a peer, to signal listeners and monitors,
//! to a peer that did not negotiate fd passing, and to the driver.

use quickbus_client::Value;

use super::{call_to, s, signal, Scenario};

fn pipe_end() -> std::os::fd::OwnedFd {
    let (read, _write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
    read
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.push(Scenario::new("fds/call-to-peer", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        let fd = pipe_end();
        script.send_with_fds(
            "a",
            call_to(&b, "TakeFd").body(vec![Value::UnixFd(0)]),
            &[&fd],
        );
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("fds/two-fds", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        let (x, y) = (pipe_end(), pipe_end());
        let body = vec![Value::UnixFd(1), Value::UnixFd(0)];
        script.send_with_fds("a", call_to(&b, "TakeFds").body(body), &[&x, &y]);
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all.push(Scenario::new("fds/signal-to-listeners", |script| {
        script.client("a");
        script.client("b");
        script.client("c");
        script.bus("b", "AddMatch", vec![s("member='WithFd'")]);
        script.bus("c", "AddMatch", vec![s("member='WithFd'")]);
        let fd = pipe_end();
        script.send_with_fds("a", signal("WithFd").body(vec![Value::UnixFd(0)]), &[&fd]);
        script.drain("b");
        script.drain("c");
    }));
    all.push(Scenario::new("fds/to-peer-without-fd-passing", |script| {
        script.client("a");
        script.connect_with("b", false);
        script.hello("b");
        script.bus("b", "AddMatch", vec![s("member='WithFd'")]);
        let b = script.unique_name("b");
        let fd = pipe_end();
        script.send_with_fds(
            "a",
            call_to(&b, "TakeFd").body(vec![Value::UnixFd(0)]),
            &[&fd],
        );
        script.send_with_fds("a", signal("WithFd").body(vec![Value::UnixFd(0)]), &[&fd]);
        script.drain("a");
        script.drain("b");
    }));
    all.push(Scenario::new("fds/to-the-driver", |script| {
        script.client("a");
        let fd = pipe_end();
        let call = super::bus_call("GetId");
        script.send_with_fds("a", call, &[&fd]);
    }));
    all.push(Scenario::new("fds/fd-not-in-body", |script| {
        script.client("a");
        script.client("b");
        let b = script.unique_name("b");
        let fd = pipe_end();
        script.send_with_fds("a", call_to(&b, "StrayFd").body(vec![s("no h")]), &[&fd]);
        script.reply("b", vec![]);
        script.drain("a");
    }));
    all
}
