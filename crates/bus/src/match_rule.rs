//! Match rules: parsing and matching (owned by the match-rule author).
