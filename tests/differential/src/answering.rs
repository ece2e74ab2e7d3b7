//! Answering method calls from a script, shared by the scenario harness
//! ([`crate::script`]) and the sandbox harness
//! ([`crate::sandbox::harness`]): a connection remembers the calls it
//! received and has not answered, and a step answers the oldest with a
//! scripted return or error.

use std::collections::VecDeque;

use quickbus_client::{Message, MessageBuilder, MessageType, Value};

use crate::script::s;

/// What a script answers a call with.
pub enum Answer<'a> {
    /// A method return carrying this body.
    Return(Vec<Value>),
    /// An error of this name, with the text "scripted error".
    Error(&'a str),
}

/// The method calls a connection received and has not answered yet, by
/// (sender, serial), oldest first.
#[derive(Default)]
pub struct Unanswered(VecDeque<(String, u32)>);

impl Unanswered {
    /// Remembers `message` if it is a method call with a sender (one the
    /// connection can answer).
    pub fn record(&mut self, message: &Message) {
        if message.msg_type() != MessageType::MethodCall {
            return;
        }
        if let Some(sender) = message.sender() {
            self.0.push_back((sender.to_owned(), message.serial()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `answer` to the oldest call, addressed to its caller, which then
    /// counts as answered; None when no call is waiting.
    pub fn answer_oldest(&mut self, answer: Answer<'_>) -> Option<MessageBuilder> {
        let (sender, serial) = self.0.pop_front()?;
        let reply = match answer {
            Answer::Return(body) => MessageBuilder::method_return(serial).body(body),
            Answer::Error(name) => {
                MessageBuilder::error(serial, name).body(vec![s("scripted error")])
            }
        };
        Some(reply.destination(sender))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(builder: MessageBuilder, serial: u32) -> Message {
        Message::parse(builder.build(serial).expect("builds")).expect("parses")
    }

    fn call_from(sender: &str, serial: u32) -> Message {
        received(
            MessageBuilder::method_call("/a", "Do")
                .sender(sender)
                .destination(":1.9"),
            serial,
        )
    }

    #[test]
    fn the_oldest_call_is_answered_first_and_only_once() {
        let mut unanswered = Unanswered::default();
        unanswered.record(&call_from(":1.1", 7));
        unanswered.record(&received(
            MessageBuilder::signal("/a", "org.example.I", "Changed").sender(":1.2"),
            8,
        ));
        unanswered.record(&call_from(":1.3", 9));

        let reply = unanswered
            .answer_oldest(Answer::Return(vec![s("ok")]))
            .expect("a call waits");
        let reply = received(reply, 1);
        assert_eq!(reply.msg_type(), MessageType::MethodReturn);
        assert_eq!(
            (reply.destination(), reply.reply_serial()),
            (Some(":1.1"), Some(7))
        );

        let error = unanswered
            .answer_oldest(Answer::Error("org.example.Failed"))
            .expect("a second call waits");
        let error = received(error, 2);
        assert_eq!(error.msg_type(), MessageType::Error);
        assert_eq!(error.error_name(), Some("org.example.Failed"));
        assert_eq!(
            (error.destination(), error.reply_serial()),
            (Some(":1.3"), Some(9))
        );

        assert!(unanswered.is_empty(), "the signal is no call");
        assert!(unanswered.answer_oldest(Answer::Return(vec![])).is_none());
    }

    #[test]
    fn a_call_without_a_sender_cannot_be_answered() {
        let mut unanswered = Unanswered::default();
        unanswered.record(&received(MessageBuilder::method_call("/a", "Do"), 1));
        assert!(unanswered.is_empty());
    }
}
