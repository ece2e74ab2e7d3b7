//! dbus-monitor's `--profile` output: a two-line header, then one
//! tab-separated line per message.

use std::fmt::Write;

use quickbus_client::{Message, MessageType};

/// Printed once before the first message.
pub const HEADER: &str = "#type\ttimestamp\tserial\tsender\tdestination\tpath\tinterface\tmember\n#\t\t\t\t\tin_reply_to\n";

/// One message's line (absent fields as `<none>`, like dbus-monitor).
pub fn format_line(msg: &Message, sec: u64, usec: u32) -> String {
    let none = |s: Option<&str>| s.unwrap_or("<none>").to_owned();
    let kind = match msg.msg_type() {
        MessageType::MethodCall => "mc",
        MessageType::MethodReturn => "mr",
        MessageType::Error => "err",
        MessageType::Signal => "sig",
    };
    let mut out = format!(
        "{kind}\t{sec}.{usec:06}\t{}\t{}\t{}",
        msg.serial(),
        none(msg.sender()),
        none(msg.destination())
    );
    let _ = match msg.msg_type() {
        MessageType::MethodCall | MessageType::Signal => write!(
            out,
            "\t{}\t{}\t{}",
            none(msg.path()),
            none(msg.interface()),
            none(msg.member())
        ),
        MessageType::MethodReturn | MessageType::Error => {
            write!(out, "\t{}", msg.reply_serial().unwrap_or(0))
        }
    };
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickbus_wire::MessageBuilder;

    #[test]
    fn lines_per_type() {
        let parse = |b: MessageBuilder| Message::parse(b.build(7).unwrap()).unwrap();
        let call = parse(
            MessageBuilder::method_call("/a", "Do")
                .interface("org.example.I")
                .sender(":1.1")
                .destination("org.example"),
        );
        assert_eq!(
            format_line(&call, 12, 5),
            "mc\t12.000005\t7\t:1.1\torg.example\t/a\torg.example.I\tDo\n"
        );
        let sig = parse(MessageBuilder::signal("/a", "org.example.I", "Boom"));
        assert_eq!(
            format_line(&sig, 12, 5),
            "sig\t12.000005\t7\t<none>\t<none>\t/a\torg.example.I\tBoom\n"
        );
        let ret = parse(MessageBuilder::method_return(3).destination(":1.1"));
        assert_eq!(
            format_line(&ret, 1, 0),
            "mr\t1.000000\t7\t<none>\t:1.1\t3\n"
        );
        let err = parse(MessageBuilder::error(4, "a.b.C"));
        assert_eq!(
            format_line(&err, 1, 0),
            "err\t1.000000\t7\t<none>\t<none>\t4\n"
        );
    }
}
