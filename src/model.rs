//! Names a project is made of, validated the way Kubebuilder validates them.
//!
//! Each newtype checks its value once, in `FromStr`, so clap can use it as a value parser and the rest of
//! the code never sees an invalid name. Every error says what was wrong, which rule applies, and how to fix it.

use std::fmt;
use std::str::FromStr;

use heck::{ToSnakeCase, ToUpperCamelCase};

/// Why a name was refused: the value, the rule it breaks, and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidName {
    pub what: &'static str,
    pub value: String,
    pub rule: String,
    pub fix: String,
}

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} `{}`: {}\nhelp: {}",
            self.what, self.value, self.rule, self.fix
        )
    }
}

impl std::error::Error for InvalidName {}

fn invalid(
    what: &'static str,
    value: &str,
    rule: impl Into<String>,
    fix: impl Into<String>,
) -> InvalidName {
    InvalidName {
        what,
        value: value.to_string(),
        rule: rule.into(),
        fix: fix.into(),
    }
}

/// Refuses a value that looks like a flag: `--group --version v1` would otherwise take `--version` as the group.
fn not_a_flag(what: &'static str, value: &str) -> Result<(), InvalidName> {
    if value.starts_with('-') {
        return Err(invalid(
            what,
            value,
            "it starts with `-`, so it looks like another flag: the flag before it is probably missing its value",
            format!(
                "give the {what} a value, e.g. `--{} <VALUE>`",
                what.replace(' ', "-")
            ),
        ));
    }
    Ok(())
}

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending alphanumeric, at most 63 characters.
pub fn dns1123_label_error(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("it is empty");
    }
    if s.len() > 63 {
        return Some("it is longer than 63 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("only lowercase letters, digits and `-` are allowed");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("it must start and end with a letter or digit");
    }
    None
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
pub fn dns1123_subdomain_error(s: &str) -> Option<&'static str> {
    if s.len() > 253 {
        return Some("it is longer than 253 characters");
    }
    s.split('.').find_map(dns1123_label_error)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter.
pub fn dns1035_label_error(s: &str) -> Option<&'static str> {
    dns1123_label_error(s).or_else(|| {
        (!s.starts_with(|c: char| c.is_ascii_lowercase()))
            .then_some("it must start with a lowercase letter")
    })
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// The project's domain, e.g. `example.com`: API groups are `<group>.<domain>`.
    Domain
);
name_type!(
    /// An API group without the domain, e.g. `cache`.
    Group
);
name_type!(
    /// An API version, e.g. `v1alpha1`.
    Version
);
name_type!(
    /// A resource kind, e.g. `Memcached`.
    Kind
);
name_type!(
    /// The lowercase plural resource name, e.g. `memcacheds`.
    Plural
);
name_type!(
    /// The project name: a DNS-1123 label, also the Cargo package name.
    ProjectName
);
name_type!(
    /// The name of a controller (`--controller-name`), e.g. `memcached-backup`: a DNS-1035 label.
    ControllerName
);

name_type!(
    /// The route of an admission webhook on the manager's webhook server (`--defaulting-path`,
    /// `--validation-path`), e.g. `/custom-mutate-sailor`.
    WebhookPath
);

impl FromStr for WebhookPath {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        const WHAT: &str = "webhook path";
        let fix = "use an absolute path of letters, digits, `-`, `_`, `.` and `~` between single `/`, e.g. `/custom-mutate-memcached`";
        let rule = if s.is_empty() {
            Some("it is empty".to_string())
        } else if !s.starts_with('/') {
            Some("the API server calls the webhook at this path of the webhook server's URL, so it starts with `/`".to_string())
        } else if s == "/" {
            Some("`/` names no webhook".to_string())
        } else if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "/-_.~".contains(*c)))
        {
            Some(match c {
                '?' | '#' => {
                    format!("`{c}` starts a query or fragment: the API server calls a path alone")
                }
                c if c.is_whitespace() => "it holds whitespace".to_string(),
                ',' | '=' | ';' => format!(
                    "`{c}` would break the `// +rustbuilder:webhook:` marker that holds the path"
                ),
                c => format!("`{c}` is not allowed in a webhook path"),
            })
        } else if s.split('/').skip(1).any(|segment| segment.is_empty()) {
            Some("it has an empty segment (`//`, or a trailing `/`)".to_string())
        } else if s
            .split('/')
            .any(|segment| segment == "." || segment == "..")
        {
            Some("`.` and `..` segments are not allowed: the path is used as written".to_string())
        } else if s == "/convert" {
            Some("`/convert` is the conversion webhook's route".to_string())
        } else {
            None
        };
        match rule {
            Some(rule) => Err(invalid(WHAT, s, rule, fix)),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl FromStr for ControllerName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("controller name", s)?;
        match dns1035_label_error(s) {
            Some(why) => Err(invalid(
                "controller name",
                s,
                format!("a controller name must be a DNS-1035 label ({why})"),
                "use lowercase letters, digits and `-`, e.g. `--controller-name memcached-backup`",
            )),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl ControllerName {
    /// The module and file name: `memcached-backup` → `memcached_backup`.
    pub fn snake(&self) -> String {
        self.0.replace('-', "_")
    }
}

impl FromStr for Domain {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("domain", s)?;
        match dns1123_subdomain_error(s) {
            Some(why) => Err(invalid(
                "domain",
                s,
                format!("a domain must be a DNS-1123 subdomain ({why})"),
                "use lowercase words separated by dots, e.g. `--domain example.com`",
            )),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl FromStr for Group {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("group", s)?;
        match dns1123_subdomain_error(s) {
            Some(why) => Err(invalid(
                "group",
                s,
                format!("`<group>.<domain>` must be a DNS-1123 subdomain ({why})"),
                "use a short lowercase word, e.g. `--group cache`",
            )),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl Group {
    /// Checks the full API group `<group>.<domain>` against the DNS-1123 subdomain rule.
    pub fn qualified(&self, domain: &Domain) -> Result<String, InvalidName> {
        let full = format!("{}.{}", self.0, domain.0);
        match dns1123_subdomain_error(&full) {
            Some(why) => Err(invalid(
                "group",
                &self.0,
                format!("the API group `{full}` must be a DNS-1123 subdomain ({why})"),
                "choose a shorter group or domain",
            )),
            None => Ok(full),
        }
    }

    /// The Rust identifier used for modules and roles, e.g. `cache` or `web_apps` for `web-apps`.
    pub fn snake(&self) -> String {
        self.0.replace(['-', '.'], "_")
    }
}

impl FromStr for Version {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("version", s)?;
        let fix = "use Kubernetes' version form, e.g. `v1`, `v1alpha1` or `v2beta3`";
        if let Some(why) = dns1035_label_error(s) {
            return Err(invalid(
                "version",
                s,
                format!("a version must be a DNS-1035 label ({why})"),
                fix,
            ));
        }
        if s.contains('-') {
            return Err(invalid(
                "version",
                s,
                "a version becomes a Rust module name, so `-` is not allowed",
                fix,
            ));
        }
        Ok(Self(s.to_string()))
    }
}

impl FromStr for Kind {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("kind", s)?;
        let fix = format!(
            "write the kind in PascalCase, e.g. `--kind {}`",
            suggest_kind(s)
        );
        if !s.starts_with(|c: char| c.is_ascii_uppercase()) {
            return Err(invalid(
                "kind",
                s,
                "a kind must start with an uppercase letter",
                fix,
            ));
        }
        if let Some(why) = dns1035_label_error(&s.to_lowercase()) {
            return Err(invalid(
                "kind",
                s,
                format!("the lowercase kind must be a DNS-1035 label ({why})"),
                fix,
            ));
        }
        if !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(invalid(
                "kind",
                s,
                "a kind becomes a Rust type name, so only letters and digits are allowed",
                fix,
            ));
        }
        Ok(Self(s.to_string()))
    }
}

fn suggest_kind(s: &str) -> String {
    let camel = s.to_upper_camel_case();
    if camel.is_empty() {
        "Memcached".to_string()
    } else {
        camel
    }
}

impl Kind {
    /// File and module name: `MemcachedCluster` → `memcached_cluster`.
    pub fn snake(&self) -> String {
        self.0.to_snake_case()
    }

    /// The plural Kubernetes derives by default (English rules, as Kubebuilder applies them).
    pub fn default_plural(&self) -> Plural {
        Plural(pluralize(&self.0.to_lowercase()))
    }
}

/// English plural of a lowercase word, covering the regular cases Kubernetes resource names use.
fn pluralize(word: &str) -> String {
    const SAME: &[&str] = &[
        "data",
        "metadata",
        "info",
        "information",
        "equipment",
        "series",
        "species",
        "news",
    ];
    if SAME.contains(&word) {
        return word.to_string();
    }
    let bytes = word.as_bytes();
    let consonant_y =
        bytes.len() > 1 && word.ends_with('y') && !b"aeiou".contains(&bytes[bytes.len() - 2]);
    if consonant_y {
        format!("{}ies", &word[..word.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| word.ends_with(end))
    {
        format!("{word}es")
    } else {
        format!("{word}s")
    }
}

impl FromStr for Plural {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("plural", s)?;
        match dns1035_label_error(s) {
            Some(why) => Err(invalid(
                "plural",
                s,
                format!("a plural must be a DNS-1035 label ({why})"),
                "use the lowercase plural of the kind, e.g. `--plural memcacheds`",
            )),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl FromStr for ProjectName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        not_a_flag("project name", s)?;
        match dns1123_label_error(s) {
            Some(why) => Err(invalid(
                "project name",
                s,
                format!("a project name must be a DNS-1123 label ({why})"),
                "use lowercase letters, digits and `-`, e.g. `--project-name memcached-operator`",
            )),
            None if s.starts_with(|c: char| c.is_ascii_digit()) => Err(invalid(
                "project name",
                s,
                "it becomes a Cargo package name, which cannot start with a digit",
                "start it with a letter, e.g. `--project-name my-operator`",
            )),
            None => Ok(Self(s.to_string())),
        }
    }
}

impl ProjectName {
    /// The crate name Rust code refers to: `memcached-operator` → `memcached_operator`.
    pub fn crate_name(&self) -> String {
        self.0.replace('-', "_")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_tutorial_names() {
        assert_eq!(
            "example.com".parse::<Domain>().unwrap().as_str(),
            "example.com"
        );
        assert_eq!("cache".parse::<Group>().unwrap().as_str(), "cache");
        assert_eq!("v1alpha1".parse::<Version>().unwrap().as_str(), "v1alpha1");
        assert_eq!(
            "Memcached"
                .parse::<Kind>()
                .unwrap()
                .default_plural()
                .as_str(),
            "memcacheds"
        );
    }

    #[test]
    fn refuses_bad_names_with_rule_and_fix() {
        let err = "Example.com".parse::<Domain>().unwrap_err();
        assert!(err.to_string().contains("DNS-1123"), "{err}");
        let err = "memcached".parse::<Kind>().unwrap_err();
        assert!(err.to_string().contains("uppercase"), "{err}");
        assert!(err.fix.contains("Memcached"), "{}", err.fix);
        assert!("Mem-cached".parse::<Kind>().is_err());
        assert!("1v".parse::<Version>().is_err());
        assert!("v1-alpha".parse::<Version>().is_err());
        assert!("Caches".parse::<Plural>().is_err());
        assert!("9lives".parse::<ProjectName>().is_err());
        assert!("under_score".parse::<Group>().is_err());
    }

    #[test]
    fn refuses_values_that_look_like_flags() {
        let err = "--version".parse::<Group>().unwrap_err();
        assert!(err.rule.contains("looks like another flag"), "{err}");
    }

    #[test]
    fn qualified_group_is_checked_with_the_domain() {
        let domain: Domain = "example.com".parse().unwrap();
        assert_eq!(
            "cache"
                .parse::<Group>()
                .unwrap()
                .qualified(&domain)
                .unwrap(),
            "cache.example.com"
        );
        let long: Group = "a".repeat(63).parse().unwrap();
        let long_domain: Domain = format!("{0}.{0}.{0}", "b".repeat(63)).parse().unwrap();
        assert!(long.qualified(&long_domain).is_err());
    }

    #[test]
    fn plurals_follow_english_rules() {
        for (word, plural) in [
            ("memcached", "memcacheds"),
            ("policy", "policies"),
            ("gateway", "gateways"),
            ("box", "boxes"),
            ("bus", "buses"),
            ("match", "matches"),
            ("data", "data"),
        ] {
            assert_eq!(pluralize(word), plural);
        }
    }

    #[test]
    fn webhook_paths_are_absolute_url_paths() {
        for good in ["/custom-mutate-sailor", "/v1/validate_admiral", "/a.b~c"] {
            assert_eq!(good.parse::<WebhookPath>().unwrap().as_str(), good);
        }
        for (bad, why) in [
            ("", "empty"),
            ("custom", "starts with `/`"),
            ("/", "names no webhook"),
            ("/a b", "whitespace"),
            ("/a?x=1", "query"),
            ("/a#b", "fragment"),
            ("/a,b", "marker"),
            ("/a//b", "empty segment"),
            ("/a/", "empty segment"),
            ("/a/../b", "`..`"),
            ("/convert", "conversion"),
            ("/caf\u{e9}", "not allowed"),
        ] {
            let err = bad.parse::<WebhookPath>().unwrap_err();
            assert!(err.rule.contains(why), "{bad:?}: {err}");
            assert!(err.fix.contains("/custom-mutate-memcached"), "{err}");
        }
    }

    #[test]
    fn snake_names() {
        assert_eq!(
            "MemcachedCluster".parse::<Kind>().unwrap().snake(),
            "memcached_cluster"
        );
        assert_eq!(
            "memcached-operator"
                .parse::<ProjectName>()
                .unwrap()
                .crate_name(),
            "memcached_operator"
        );
    }
}
