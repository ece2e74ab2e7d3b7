//! Policies naming `DynamicUser=` accounts, which come and go with their
//! units while the policy was resolved once, at load.
//!
//! - The bus usually starts first: a policy's name was unknown at load
//!   ("Unknown username", the policy skipped, as dbus-daemon skips it) and
//!   would stay so until the next reload.
//! - A dynamic uid the policy resolved is released when its unit stops,
//!   and PID 1 may later give it to another dynamic user, who must not
//!   inherit the first one's rules.
//!
//! So the daemon keeps the loaded `<policy>` elements, the names NSS did
//! not know, and which uid each of them had through the dynamic-user
//! links. When a connection comes from a uid that now bears one of the
//! unknown names, or that no longer bears the name the policy gave it,
//! the policy is resolved again before the connection counts: the rules
//! apply to it from its first message.
//!
//! Only dynamic users trigger this (a static user created after start-up
//! counts from the next reload, on dbus-daemon too). It costs one
//! `readlink` per new connection, and only while the policy names someone
//! NSS does not know.

use std::collections::{BTreeMap, BTreeSet};

use quickbus_bus::PolicyConfig;

use crate::config::{Policy, PolicyScope};
use crate::dynamic_users::DynamicUsers;
use crate::userdb::UserDb;

/// The loaded policy's sources, and what became of the names NSS did not
/// know.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct LateUsers {
    policies: Vec<Policy>,
    /// Known neither to NSS nor as dynamic users.
    unknown: BTreeSet<String>,
    /// Resolved through the dynamic-user links: uid to name.
    dynamic_ids: BTreeMap<u32, String>,
    dynamic: DynamicUsers,
}

/// Why the policy was resolved again, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// The dynamic user `name` exists now.
    Appeared { name: String },
    /// The uid is no longer (or no longer only) the dynamic user `name`.
    Released { name: String },
}

impl LateUsers {
    /// The `<policy>` elements just loaded (and resolved with the system's
    /// user database).
    pub fn new(policies: Vec<Policy>) -> LateUsers {
        LateUsers::with_dynamic_users(policies, DynamicUsers::default())
    }

    /// The same, with `dynamic` standing in for systemd's dynamic users.
    pub fn with_dynamic_users(policies: Vec<Policy>, dynamic: DynamicUsers) -> LateUsers {
        let mut late = LateUsers {
            policies,
            unknown: BTreeSet::new(),
            dynamic_ids: BTreeMap::new(),
            dynamic,
        };
        late.sort_names();
        late
    }

    /// When a connection of `uid` changes what the policy's names mean:
    /// why, and the policy resolved anew.
    pub fn new_policy_for(
        &mut self,
        uid: u32,
        warn: &mut dyn FnMut(String),
    ) -> Option<(Change, Result<PolicyConfig, String>)> {
        if self.unknown.is_empty() && self.dynamic_ids.is_empty() {
            return None;
        }
        let now = self.dynamic.name(uid);
        let change = match (self.dynamic_ids.get(&uid), now) {
            (Some(was), now) if now.as_ref() != Some(was) => Change::Released { name: was.clone() },
            (None, Some(now)) if self.unknown.contains(&now) => Change::Appeared { name: now },
            _ => return None,
        };
        let db = UserDb::with_dynamic_users(self.dynamic.clone());
        let policy = crate::policy::bus_policy(&self.policies, &db, warn);
        self.sort_names();
        Some((change, policy))
    }

    /// Sorts the names NSS does not know into unknown ones and dynamic
    /// users.
    fn sort_names(&mut self) {
        let nss_only = UserDb::nss_only();
        self.unknown.clear();
        self.dynamic_ids.clear();
        for (name, is_group) in names(&self.policies) {
            let known = if is_group {
                nss_only.gid(name)
            } else {
                nss_only.uid(name)
            };
            if known.is_some() {
                continue;
            }
            match self.dynamic.uid(name) {
                Some(id) => {
                    self.dynamic_ids.insert(id, name.to_owned());
                }
                None => {
                    self.unknown.insert(name.to_owned());
                }
            }
        }
    }
}

/// Every user and group name the policies give (not `*`), with whether it
/// names a group. A dynamic user's group bears its name and number.
fn names(policies: &[Policy]) -> impl Iterator<Item = (&str, bool)> {
    policies.iter().flat_map(|policy| {
        let scope = match &policy.scope {
            PolicyScope::User(name) => Some((name.as_str(), false)),
            PolicyScope::Group(name) => Some((name.as_str(), true)),
            _ => None,
        };
        let rules = policy.rules.iter().flat_map(|rule| {
            let user = rule.attribute("user").map(|n| (n, false));
            let group = rule.attribute("group").map(|n| (n, true));
            user.into_iter().chain(group)
        });
        scope
            .into_iter()
            .chain(rules)
            .filter(|(name, _)| *name != "*")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    const CONFIG: &str = r#"<busconfig><listen>unix:path=/nonexistent</listen>
  <policy context="default"><allow user="*"/><allow user="qb-late-connect"/></policy>
  <policy user="qb-late-owner"><allow own="org.example.Late"/></policy>
  <policy user="root"><allow own="org.example.Root"/></policy>
</busconfig>"#;

    fn policies() -> Vec<Policy> {
        crate::config::parse_str(CONFIG, "/test/late.conf")
            .unwrap()
            .policies
    }

    fn empty_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qb-late-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// PID 1 allocating dynamic user `name` as `uid`.
    fn allocate(dir: &std::path::Path, name: &str, uid: u32) {
        symlink(uid.to_string(), dir.join(format!("direct:{name}"))).unwrap();
        symlink(name, dir.join(format!("direct:{uid}"))).unwrap();
    }

    const UID: u32 = 3_999_999_201;

    #[test]
    fn a_named_dynamic_user_resolves_the_policy_once() {
        let dir = empty_dir("once");
        let mut late = LateUsers::with_dynamic_users(policies(), DynamicUsers::at(&dir));
        let mut warnings = Vec::new();
        // Nobody dynamic yet: both names unknown, nothing to do.
        assert_eq!(
            late.unknown.iter().map(String::as_str).collect::<Vec<_>>(),
            ["qb-late-connect", "qb-late-owner"]
        );
        assert!(late
            .new_policy_for(UID, &mut |w| warnings.push(w))
            .is_none());
        // The unit starts: its user's first connection resolves the policy.
        allocate(&dir, "qb-late-owner", UID);
        let (change, policy) = late.new_policy_for(UID, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(
            change,
            Change::Appeared {
                name: "qb-late-owner".into()
            }
        );
        let policy = policy.unwrap();
        assert!(policy.by_user.contains_key(&UID), "{policy:?}");
        assert!(policy.by_user.contains_key(&0));
        // The other name is still unknown, and said so again.
        assert!(
            warnings.iter().any(|w| w.contains("qb-late-connect")),
            "{warnings:?}"
        );
        assert!(
            !warnings.iter().any(|w| w.contains("qb-late-owner")),
            "{warnings:?}"
        );
        // Known now: the next connection of that user changes nothing.
        assert!(late.new_policy_for(UID, &mut |_| {}).is_none());
        // A dynamic user no policy names changes nothing either.
        allocate(&dir, "qb-late-other", UID + 1);
        assert!(late.new_policy_for(UID + 1, &mut |_| {}).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_released_uid_loses_the_rules_of_its_former_user() {
        let dir = empty_dir("released");
        allocate(&dir, "qb-late-owner", UID);
        let mut late = LateUsers::with_dynamic_users(policies(), DynamicUsers::at(&dir));
        assert_eq!(
            late.dynamic_ids.get(&UID).map(String::as_str),
            Some("qb-late-owner")
        );
        assert!(late.new_policy_for(UID, &mut |_| {}).is_none());
        // The unit stops; PID 1 gives the uid to another dynamic user.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        allocate(&dir, "qb-late-stranger", UID);
        let (change, policy) = late.new_policy_for(UID, &mut |_| {}).unwrap();
        assert_eq!(
            change,
            Change::Released {
                name: "qb-late-owner".into()
            }
        );
        assert!(!policy.unwrap().by_user.contains_key(&UID));
        // The owner's name is unknown again, to be resolved when it returns.
        assert!(late.unknown.contains("qb-late-owner"));
        assert!(late.dynamic_ids.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn connect_rules_naming_a_dynamic_user_count_too() {
        let dir = empty_dir("connect");
        let mut late = LateUsers::with_dynamic_users(policies(), DynamicUsers::at(&dir));
        allocate(&dir, "qb-late-connect", UID);
        let (change, policy) = late.new_policy_for(UID, &mut |_| {}).unwrap();
        assert_eq!(
            change,
            Change::Appeared {
                name: "qb-late-connect".into()
            }
        );
        let rules = format!("{:?}", policy.unwrap().default);
        assert!(rules.contains(&format!("User(Some({UID}))")), "{rules}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_policy_without_unknown_names_costs_nothing() {
        let policies = crate::config::parse_str(
            r#"<busconfig><listen>unix:path=/nonexistent</listen><policy user="root"><allow own="a.b"/></policy>
               <policy user="*"><allow own="c.d"/></policy></busconfig>"#,
            "/test/known.conf",
        )
        .unwrap()
        .policies;
        let late = LateUsers::with_dynamic_users(
            policies,
            DynamicUsers::at(std::path::Path::new("/nonexistent")),
        );
        assert!(late.unknown.is_empty());
        assert!(late.dynamic_ids.is_empty());
    }
}
