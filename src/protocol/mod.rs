//! What provider and manager agree on: the shared buffer header layout, the 16-byte FIFO
//! packets, the control messages, and the Unix-socket transport that carries them.

pub mod control;
pub mod fifo;
pub mod header;
pub mod transport;
