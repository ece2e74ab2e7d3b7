//! A busconfig document as a small element tree with line numbers.
//!
//! quick-xml does the XML (well-formedness, entities, duplicate
//! attributes); this module keeps only what the configuration needs:
//! element names, attributes in order, the trimmed text content, children,
//! and the line each element starts on, for `FILE:LINE:` messages.
//! Comments, the doctype and processing instructions are skipped.

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    /// Text directly inside the element, whitespace-trimmed at both ends.
    pub text: String,
    pub children: Vec<Element>,
    /// 1-based line of the element's `<`.
    pub line: usize,
}

impl Element {
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A syntax error and the 1-based line it was found on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlError {
    pub line: usize,
    pub reason: String,
}

/// Parse `text` into its root element.
pub fn parse(text: &str) -> Result<Element, XmlError> {
    let lines = LineIndex::new(text);
    let mut reader = Reader::from_str(text);
    reader.config_mut().trim_text(false);
    // Elements opened and not yet closed; the last one receives content.
    let mut open: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let start = reader.buffer_position();
        let event = reader.read_event().map_err(|e| XmlError {
            line: lines.line_of(reader.error_position()),
            reason: format!("malformed XML: {e}"),
        })?;
        let line = lines.line_of(start);
        let outside = |what: &str| XmlError {
            line,
            reason: format!("{what} outside the <busconfig> element"),
        };
        match event {
            Event::Start(tag) => {
                if root.is_some() && open.is_empty() {
                    return Err(outside("a second root element"));
                }
                open.push(element(&tag, line)?);
            }
            Event::Empty(tag) => {
                let done = element(&tag, line)?;
                match open.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None if root.is_none() => root = Some(done),
                    None => return Err(outside("a second root element")),
                }
            }
            Event::End(_) => {
                // quick-xml has checked that the name matches.
                let mut done = open.pop().ok_or_else(|| outside("a closing tag"))?;
                done.text = done.text.trim().to_owned();
                match open.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => root = Some(done),
                }
            }
            Event::Text(content) => {
                let content = content.unescape().map_err(|e| XmlError {
                    line,
                    reason: format!("malformed XML: {e}"),
                })?;
                match open.last_mut() {
                    Some(current) => current.text.push_str(&content),
                    None if content.trim().is_empty() => {}
                    None => return Err(outside("text")),
                }
            }
            Event::CData(content) => {
                let content = String::from_utf8_lossy(&content.into_inner()).into_owned();
                match open.last_mut() {
                    Some(current) => current.text.push_str(&content),
                    None => return Err(outside("text")),
                }
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(unclosed) = open.last() {
        return Err(XmlError {
            line: lines.line_of(text.len() as u64),
            reason: format!(
                "malformed XML: the file ends inside <{}> (opened on line {})",
                unclosed.name, unclosed.line
            ),
        });
    }
    root.ok_or(XmlError {
        line: lines.line_of(text.len() as u64),
        reason: "no <busconfig> element in the file".into(),
    })
}

fn element(tag: &BytesStart<'_>, line: usize) -> Result<Element, XmlError> {
    let bad = |reason: String| XmlError { line, reason };
    let name = String::from_utf8_lossy(tag.name().as_ref()).into_owned();
    let mut attributes = Vec::new();
    for attribute in tag.attributes() {
        let attribute = attribute.map_err(|e| bad(format!("malformed XML in <{name}>: {e}")))?;
        let key = String::from_utf8_lossy(attribute.key.as_ref()).into_owned();
        let value = attribute
            .unescape_value()
            .map_err(|e| bad(format!("malformed XML in <{name}>: {e}")))?;
        attributes.push((key, value.into_owned()));
    }
    Ok(Element {
        name,
        attributes,
        text: String::new(),
        children: Vec::new(),
        line,
    })
}

/// Byte offset to line number.
struct LineIndex {
    /// Offset of the first byte of every line after the first.
    starts: Vec<u64>,
}

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let starts = text
            .bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i as u64 + 1)
            .collect();
        LineIndex { starts }
    }

    fn line_of(&self, offset: u64) -> usize {
        self.starts.partition_point(|&start| start <= offset) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_keep_attributes_text_children_and_lines() {
        let root = parse(
            "<!-- c -->\n<!DOCTYPE busconfig PUBLIC \"x\" \"y\">\n<busconfig>\n  <listen>\n  unix:path=/a&amp;b </listen>\n  <policy context=\"default\" user=\"&lt;\">\n    <allow own=\"*\"/>\n  </policy>\n</busconfig>\n",
        )
        .unwrap();
        assert_eq!(root.name, "busconfig");
        assert_eq!(root.line, 3);
        assert_eq!(root.children.len(), 2);
        let listen = &root.children[0];
        assert_eq!((listen.name.as_str(), listen.line), ("listen", 4));
        assert_eq!(listen.text, "unix:path=/a&b");
        let policy = &root.children[1];
        assert_eq!(policy.line, 6);
        assert_eq!(
            policy.attributes,
            vec![
                ("context".to_owned(), "default".to_owned()),
                ("user".to_owned(), "<".to_owned())
            ]
        );
        assert_eq!(policy.attribute("user"), Some("<"));
        assert_eq!(policy.children[0].line, 7);
        assert_eq!(policy.children[0].attribute("own"), Some("*"));
    }

    #[test]
    fn character_references_and_comments_inside_text_are_handled() {
        let root = parse("<a><b>x&#100;<!-- no -->y</b></a>").unwrap();
        assert_eq!(root.children[0].text, "xdy");
    }

    #[test]
    fn malformed_documents_are_refused_with_the_line() {
        let err = parse("<busconfig>\n  <user>me</foo>\n</busconfig>").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");
        assert!(err.reason.starts_with("malformed XML"), "{err:?}");

        let err = parse("<busconfig>\n<a x=\"1\" x=\"2\"/>\n</busconfig>").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");

        let err = parse("<busconfig>\n<user>me</user>\n").unwrap_err();
        assert_eq!(err.line, 3, "{err:?}");
        assert!(err.reason.contains("ends inside <busconfig>"), "{err:?}");

        let err = parse("<busconfig>\n  <include ignore_missing=\"y").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");

        let err = parse("<a/>\n<b/>").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");
        assert!(err.reason.contains("second root"), "{err:?}");

        let err = parse("<a/>\nstray").unwrap_err();
        assert_eq!(err.line, 1, "{err:?}");

        let err = parse("\n\n").unwrap_err();
        assert!(err.reason.contains("no <busconfig>"), "{err:?}");

        let err = parse("<a>&bogus;</a>").unwrap_err();
        assert_eq!(err.line, 1, "{err:?}");
    }
}
