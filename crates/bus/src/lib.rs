//! placeholder, replaced by the crate's author
