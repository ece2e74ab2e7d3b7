//! busconfig XML.
