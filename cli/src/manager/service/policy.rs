//! Who may do what with the trace service, decided from the peer's credentials
//! (`SO_PEERCRED`, and `SO_PEERGROUPS` for its groups, both taken when it connected).
//!
//! - **Providers.** A process may register if it runs as the service's user, or if it is in
//!   group [`PROVIDER_GROUP`]. (A root service thus takes root's services and the members of
//!   `fxtrace`; a user's service takes that user's programs.)
//! - **Controllers.** Anyone who can connect may list and trace the providers of their own
//!   uid; root, the service's user, and members of [`ADMIN_GROUP`] may trace every provider
//!   and see, stop and end every session. A controller sees and controls only its own
//!   sessions otherwise.
//! - **Archives** are files the controller opened itself (its descriptor travels with
//!   `start`), so they belong to the controller's user.
//!
//! Every refusal names the rule it applied.

use std::os::fd::{AsRawFd, BorrowedFd};

use fxtrace::protocol::transport::PeerCred;

/// Members may register providers with a service of another user.
pub const PROVIDER_GROUP: &str = "fxtrace";
/// Members may trace every provider and control every session.
pub const ADMIN_GROUP: &str = "fxtrace-admin";

/// The service's rules, with the group ids looked up once at start.
#[derive(Debug, Clone)]
pub struct Policy {
    service_uid: u32,
    provider_gid: Option<u32>,
    admin_gid: Option<u32>,
}

/// A peer as the policy sees it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Its credentials.
    pub cred: PeerCred,
    /// Its supplementary groups (and its primary group).
    pub groups: Vec<u32>,
}

impl Peer {
    /// The peer at the other end of the connected socket `fd` with credentials `cred`.
    pub fn of(fd: BorrowedFd<'_>, cred: PeerCred) -> Peer {
        let mut groups = peer_groups(fd);
        groups.push(cred.gid);
        Peer { cred, groups }
    }
}

impl Policy {
    /// The rules for a service running as `service_uid`, with the groups this system has.
    pub fn for_service(service_uid: u32) -> Policy {
        let gid = |name: &str| {
            nix::unistd::Group::from_name(name)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw())
        };
        Policy {
            service_uid,
            provider_gid: gid(PROVIDER_GROUP),
            admin_gid: gid(ADMIN_GROUP),
        }
    }

    /// Rules with explicit group ids (tests).
    pub fn with_groups(
        service_uid: u32,
        provider_gid: Option<u32>,
        admin_gid: Option<u32>,
    ) -> Policy {
        Policy {
            service_uid,
            provider_gid,
            admin_gid,
        }
    }

    /// May `peer` register a provider?
    pub fn may_register(&self, peer: &Peer) -> Result<(), String> {
        if peer.cred.uid == self.service_uid {
            return Ok(());
        }
        if self
            .provider_gid
            .is_some_and(|gid| peer.groups.contains(&gid))
        {
            return Ok(());
        }
        Err(format!(
            "uid {} may not register with a trace service of uid {}: a provider must run as \
             the service's user or be in group {PROVIDER_GROUP:?}{}",
            peer.cred.uid,
            self.service_uid,
            if self.provider_gid.is_none() {
                " (which does not exist here)"
            } else {
                ""
            }
        ))
    }

    /// May `peer` trace every provider and control every session?
    pub fn is_admin(&self, peer: &Peer) -> bool {
        peer.cred.uid == 0
            || peer.cred.uid == self.service_uid
            || self.admin_gid.is_some_and(|gid| peer.groups.contains(&gid))
    }

    /// May `peer` trace a provider running as `provider_uid`?
    pub fn may_trace(&self, peer: &Peer, provider_uid: u32) -> bool {
        provider_uid == peer.cred.uid || self.is_admin(peer)
    }

    /// May `peer` control a session started by `owner_uid`?
    pub fn may_control(&self, peer: &Peer, owner_uid: u32) -> Result<(), String> {
        if owner_uid == peer.cred.uid || self.is_admin(peer) {
            return Ok(());
        }
        Err(format!(
            "the session belongs to uid {owner_uid}: only its user, root, the service's user or \
             a member of group {ADMIN_GROUP:?} may control it"
        ))
    }
}

/// `SO_PEERGROUPS` (Linux ≥ 4.13; `asm-generic/socket.h`), not in every libc binding.
const SO_PEERGROUPS: libc::c_int = 59;

/// The peer's supplementary groups; empty when the kernel does not say.
fn peer_groups(fd: BorrowedFd<'_>) -> Vec<u32> {
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is writable for `len` bytes; `len` is a valid in/out length.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return groups;
        }
        // ERANGE: `len` says how much is needed.
        if nix::errno::Errno::last() == nix::errno::Errno::ERANGE && n > groups.len() {
            groups.resize(n, 0);
            continue;
        }
        return Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, groups: &[u32]) -> Peer {
        Peer {
            cred: PeerCred {
                pid: 1,
                uid,
                gid: 5000 + uid,
            },
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn providers_register_as_the_service_user_or_in_the_group() {
        let policy = Policy::with_groups(0, Some(900), Some(901));
        assert!(policy.may_register(&peer(0, &[])).is_ok());
        assert!(policy.may_register(&peer(1000, &[900])).is_ok());
        let refused = policy.may_register(&peer(1000, &[901])).unwrap_err();
        assert!(refused.contains("group \"fxtrace\""), "{refused}");
        let no_group = Policy::with_groups(0, None, None)
            .may_register(&peer(1000, &[]))
            .unwrap_err();
        assert!(no_group.contains("does not exist"), "{no_group}");
    }

    #[test]
    fn controllers_trace_their_own_uid_admins_everything() {
        let policy = Policy::with_groups(0, Some(900), Some(901));
        let user = peer(1000, &[900]);
        assert!(policy.may_trace(&user, 1000));
        assert!(!policy.may_trace(&user, 1001));
        assert!(policy.may_control(&user, 1001).is_err());
        let admin = peer(1002, &[901]);
        assert!(policy.may_trace(&admin, 1001));
        assert!(policy.may_control(&admin, 1001).is_ok());
        assert!(policy.is_admin(&peer(0, &[])));
    }

    #[test]
    fn the_peer_groups_of_a_socket_pair_are_this_process_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsFd;
        let groups = peer_groups(a.as_fd());
        let mine: Vec<u32> = nix::unistd::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        for g in &mine {
            assert!(groups.contains(g), "{groups:?} lacks {g}");
        }
    }
}
