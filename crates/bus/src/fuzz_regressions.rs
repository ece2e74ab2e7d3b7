//! Inputs the fuzz targets (crates/daemon/fuzz) found, kept as tests.

use crate::match_rule::MatchRule;

/// A valid rule whose canonical text outgrows the 1024-byte limit on
/// rule texts (escaping quotes makes it longer): printing must not
/// panic, and whatever fits must parse back to the same rule.
#[test]
fn match_rule_printed_longer_than_1024() {
    let text = include_str!("../fuzz_regressions/match_rule_printed_longer_than_1024");
    let rule = MatchRule::parse(text).expect("the fuzzer's input is a valid rule");
    let printed = rule.to_string();
    assert!(printed.len() > 1024);
    assert!(
        MatchRule::parse(&printed).is_err(),
        "too long to parse again"
    );
}
