//! The list of deliberate differences (`differences.toml`): which
//! scenarios may differ between dbus-daemon and quickbus, and why. Any
//! other difference fails the run, and so does an entry whose scenarios no
//! longer differ, so that the list stays true.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct List {
    #[serde(default, rename = "difference")]
    pub entries: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// A scenario name, or a prefix of names ending in `*`.
    pub scenario: String,
    /// Why quickbus answers differently (or, when pending, what is wrong).
    pub reason: String,
    /// Set while the difference is a quickbus bug fixed elsewhere (e.g.
    /// "fixed on branch corners"): the entry goes when the fix lands.
    #[serde(default)]
    pub pending: Option<String>,
}

impl Entry {
    pub fn covers(&self, scenario: &str) -> bool {
        match self.scenario.strip_suffix('*') {
            Some(prefix) => scenario.starts_with(prefix),
            None => scenario == self.scenario,
        }
    }
}

pub fn parse(text: &str) -> Result<List, String> {
    let list: List = toml::from_str(text).map_err(|e| e.to_string())?;
    for entry in &list.entries {
        if entry.reason.trim().is_empty() {
            return Err(format!("entry {:?} gives no reason", entry.scenario));
        }
    }
    Ok(list)
}

/// Reads and parses the list at `path`; panics with the reason when it
/// cannot.
pub fn load(path: &std::path::Path) -> List {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Panics when two of `names` are the same (a list entry could not tell
/// them apart).
pub fn assert_unique(names: &[String]) {
    let mut unique = names.to_vec();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "two scenarios share a name");
}

/// The verdict on one run.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Scenarios that differ and no entry covers: failures.
    pub unlisted: Vec<String>,
    /// Entries that cover no differing scenario (stale): failures.
    pub stale: Vec<String>,
    /// Entries that cover no scenario at all (typos): failures.
    pub unknown: Vec<String>,
    /// Differing scenarios covered by an entry, with the entry's index.
    pub listed: Vec<(String, usize)>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.unlisted.is_empty() && self.stale.is_empty() && self.unknown.is_empty()
    }

    /// Fails the test on an unlisted difference and, when the whole set
    /// ran (`complete`, not a `QUICKBUS_DIFF_ONLY` subset), on an entry of
    /// `list` that names no case (a typo) or a case that no longer
    /// differs (stale). `cases` names what the harness runs ("scenarios",
    /// "sandbox cases") and `reference` the side compared against.
    pub fn assert_holds(
        &self,
        list: &std::path::Path,
        cases: &str,
        reference: &str,
        complete: bool,
    ) {
        let list = list.display();
        assert!(
            self.unlisted.is_empty(),
            "{} {cases} differ from {reference} and {list} does not list them: {:?} \
             (fix quickbus, or list the difference with its reason)",
            self.unlisted.len(),
            self.unlisted
        );
        if complete {
            assert!(
                self.unknown.is_empty(),
                "{list} lists {cases} that do not exist: {:?}",
                self.unknown
            );
            assert!(
                self.stale.is_empty(),
                "{list} lists differences that no longer occur (the {cases} now agree with \
                 {reference}): remove these entries: {:?}",
                self.stale
            );
        }
    }
}

/// `scenarios` is every scenario run; `differing` those whose transcripts
/// differ.
pub fn judge(list: &List, scenarios: &[String], differing: &[String]) -> Verdict {
    let mut verdict = Verdict::default();
    for name in differing {
        match list.entries.iter().position(|e| e.covers(name)) {
            Some(index) => verdict.listed.push((name.clone(), index)),
            None => verdict.unlisted.push(name.clone()),
        }
    }
    for entry in &list.entries {
        if !scenarios.iter().any(|s| entry.covers(s)) {
            verdict.unknown.push(entry.scenario.clone());
        } else if !differing.iter().any(|s| entry.covers(s)) {
            verdict.stale.push(entry.scenario.clone());
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"
[[difference]]
scenario = "a/one"
reason = "because"

[[difference]]
scenario = "b/*"
reason = "prefix"
pending = "fixed on branch corners"
"#;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn listed_unlisted_stale_and_unknown() {
        let list = parse(LIST).unwrap();
        assert_eq!(
            list.entries[1].pending.as_deref(),
            Some("fixed on branch corners")
        );
        let all = names(&["a/one", "a/two", "b/x", "b/y"]);
        let verdict = judge(&list, &all, &names(&["a/one", "a/two", "b/y"]));
        assert_eq!(verdict.unlisted, names(&["a/two"]));
        assert!(verdict.stale.is_empty() && verdict.unknown.is_empty());
        assert_eq!(verdict.listed.len(), 2);
        assert!(!verdict.passed());

        let verdict = judge(&list, &all, &names(&["b/x"]));
        assert_eq!(verdict.stale, names(&["a/one"]));
        let verdict = judge(&list, &names(&["a/one"]), &names(&["a/one"]));
        assert_eq!(verdict.unknown, names(&["b/*"]));
    }

    #[test]
    fn entries_need_a_reason_and_known_keys() {
        assert!(parse("[[difference]]\nscenario = \"a\"\nreason = \" \"\n").is_err());
        assert!(parse("[[difference]]\nscenario = \"a\"\nreason = \"r\"\nwhy = 1\n").is_err());
    }
}
