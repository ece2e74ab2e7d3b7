//! Match-rule index (owned by the match-rule author).
