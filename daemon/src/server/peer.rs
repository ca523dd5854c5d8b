//! Who is on the other end of a connection, and whose memories it may touch.
//!
//! Each connection's peer credentials (SO_PEERCRED, read once when it is accepted) name a uid,
//! and every uid gets its own namespace of memories, unless `[peers] share` lets it use another
//! uid's. Memory ids are qualified with the namespace here, before they reach the engine, and
//! stripped on the way out: the engine never knows namespaces exist, and a caller cannot even
//! name another uid's memory, so asking for one is `not_found` (existence does not leak).

use std::collections::HashSet;
use std::ffi::{CStr, CString};

use serde::Deserialize;

/// `[peers]` in the config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersConfig {
    /// Give every uid its own memories (default). `false` puts every connection in one
    /// namespace: only for a private socket whose store predates namespaces.
    pub isolate: bool,
    /// Let other uids or groups use an agent's memories.
    pub share: Vec<ShareConfig>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        PeersConfig {
            isolate: true,
            share: Vec::new(),
        }
    }
}

/// One allow-list entry: connections from `members` work in `owner`'s namespace.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareConfig {
    /// The agent whose memories are shared: a user name or a uid.
    pub owner: String,
    /// User names, uids, or `@group` (its members and everyone whose primary group it is).
    pub members: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("[peers] share: no user {0:?} on this host")]
    NoSuchUser(String),
    #[error("[peers] share: no group {0:?} on this host")]
    NoSuchGroup(String),
}

/// The resolved allow-list (names looked up once, at start).
#[derive(Debug, Clone)]
pub struct Namespaces {
    isolate: bool,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    owner: u32,
    uids: HashSet<u32>,
    gids: HashSet<u32>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces {
            isolate: true,
            rules: Vec::new(),
        }
    }
}

impl Namespaces {
    pub fn resolve(config: &PeersConfig) -> Result<Namespaces, PeerError> {
        let mut rules = Vec::new();
        for share in &config.share {
            let owner = user_id(&share.owner).ok_or_else(|| PeerError::NoSuchUser(share.owner.clone()))?;
            let mut rule = Rule {
                owner,
                uids: HashSet::new(),
                gids: HashSet::new(),
            };
            for member in &share.members {
                if let Some(group) = member.strip_prefix('@') {
                    let (gid, members) = group_of(group).ok_or_else(|| PeerError::NoSuchGroup(group.into()))?;
                    rule.gids.insert(gid);
                    rule.uids.extend(members.iter().filter_map(|m| user_id(m)));
                } else {
                    rule.uids
                        .insert(user_id(member).ok_or_else(|| PeerError::NoSuchUser(member.clone()))?);
                }
            }
            rules.push(rule);
        }
        Ok(Namespaces {
            isolate: config.isolate,
            rules,
        })
    }

    /// The peer a connection from `uid`/`gid` is: its own namespace, or the first share
    /// rule's owner that lists it.
    pub fn peer(&self, uid: u32, gid: u32, pid: Option<i32>) -> Peer {
        let owner = self
            .rules
            .iter()
            .find(|r| r.uids.contains(&uid) || r.gids.contains(&gid))
            .map(|r| r.owner)
            .unwrap_or(uid);
        Peer {
            uid,
            gid,
            pid,
            namespace: self.isolate.then(|| format!("u{owner}")),
        }
    }
}

/// One connection's identity, fixed for its lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// `u<uid>` of the namespace's owner; None when isolation is off.
    namespace: Option<String>,
}

impl Peer {
    /// The id the engine stores: `<namespace>/<memory>`. Namespaces hold no `/`, so the first
    /// `/` ends one, and whatever a caller names, it stays inside its own.
    pub fn qualify(&self, memory: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{memory}"),
            None => memory.to_owned(),
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

fn user_id(name: &str) -> Option<u32> {
    if let Ok(uid) = name.parse::<u32>() {
        return Some(uid);
    }
    let cname = CString::new(name).ok()?;
    // SAFETY: getpwnam takes a NUL-terminated name and returns null or a pointer to static
    // storage, read at once (names are resolved at start, on one thread).
    let entry = unsafe { libc::getpwnam(cname.as_ptr()) };
    if entry.is_null() {
        None
    } else {
        // SAFETY: non-null entry from getpwnam.
        Some(unsafe { (*entry).pw_uid })
    }
}

/// A group's gid and member names.
fn group_of(name: &str) -> Option<(u32, Vec<String>)> {
    let entry = if let Ok(gid) = name.parse::<u32>() {
        // SAFETY: as for getpwnam; getgrgid returns null or static storage.
        unsafe { libc::getgrgid(gid) }
    } else {
        let cname = CString::new(name).ok()?;
        // SAFETY: NUL-terminated name; null or static storage.
        unsafe { libc::getgrnam(cname.as_ptr()) }
    };
    if entry.is_null() {
        return None;
    }
    // SAFETY: non-null group entry; gr_mem is a null-terminated array of C strings.
    unsafe {
        let gid = (*entry).gr_gid;
        let mut members = Vec::new();
        let mut p = (*entry).gr_mem;
        while !p.is_null() && !(*p).is_null() {
            members.push(CStr::from_ptr(*p).to_string_lossy().into_owned());
            p = p.add(1);
        }
        Some((gid, members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_uid_gets_its_own_namespace_and_share_rules_map_members_to_the_owner() {
        let ns = Namespaces::resolve(&PeersConfig {
            isolate: true,
            share: vec![ShareConfig {
                owner: "4000".into(),
                members: vec!["4001".into(), "@0".into()],
            }],
        })
        .unwrap();
        assert_eq!(ns.peer(4002, 4002, None).qualify("m"), "u4002/m");
        assert_eq!(ns.peer(4001, 4001, None).qualify("m"), "u4000/m", "a listed uid");
        assert_eq!(
            ns.peer(4003, 0, None).qualify("m"),
            "u4000/m",
            "primary group 0 is listed"
        );
        assert_eq!(ns.peer(4000, 4000, None).qualify("m"), "u4000/m", "the owner itself");
        // A caller cannot step into another namespace by naming it.
        assert_eq!(ns.peer(4002, 4002, None).qualify("u4000/m"), "u4002/u4000/m");
    }

    #[test]
    fn without_isolation_ids_pass_through_and_unknown_names_are_refused() {
        let ns = Namespaces::resolve(&PeersConfig {
            isolate: false,
            share: vec![],
        })
        .unwrap();
        assert_eq!(ns.peer(7, 7, None).qualify("m"), "m");
        let err = Namespaces::resolve(&PeersConfig {
            isolate: true,
            share: vec![ShareConfig {
                owner: "no-such-user-here-xyz".into(),
                members: vec![],
            }],
        })
        .unwrap_err();
        assert!(err.to_string().contains("no-such-user-here-xyz"), "{err}");
    }
}
