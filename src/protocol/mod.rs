//! What provider and manager say to each other: the 16-byte FIFO packets, the control
//! messages, and the Unix-socket transport that carries them. The memory they share (the
//! buffer and its header) is [`crate::buffer`].

pub mod control;
pub mod fifo;
pub mod transport;
