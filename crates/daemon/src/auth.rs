//! SASL server state machine.
