//! D-Bus server addresses: parsing and escaping (pure string handling, no I/O).
