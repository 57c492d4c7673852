//! CRDs inside Go modules, as Go's module cache holds them: where a Kubebuilder project's external
//! kinds come from. Kubebuilder records the Go module of another operator's types
//! (`github.com/cert-manager/cert-manager@v1.20.2`); operators ship their CRDs in the same module
//! (`deploy/crds/`, `config/crd/bases/`), and the module is in the cache once the Go project was built
//! or `go mod download <module>` ran. Nothing is downloaded here.

use std::path::{Path, PathBuf};

/// The CRD of `kind` in `api_group` inside the Go module `module` (`path@version`), as Go's module
/// cache holds it after `go mod download` or a build of the Kubebuilder project.
pub fn crd(module: &str, api_group: &str, kind: &str) -> Option<PathBuf> {
    crd_in(&module_cache()?, module, api_group, kind)
}

fn crd_in(cache: &Path, module: &str, api_group: &str, kind: &str) -> Option<PathBuf> {
    let (path, version) = module.split_once('@')?;
    let root = cache.join(format!("{}@{version}", escape_module_path(path)));
    let mut files = Vec::new();
    collect_yaml(&root, 0, &mut files);
    files.sort();
    let wanted_group = format!("group: {api_group}");
    let wanted_kind = format!("kind: {kind}");
    files.into_iter().find(|file| {
        // Cheap test first: the CRD names its group and kind on lines of their own.
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.contains("kind: CustomResourceDefinition")
                && !text.contains("{{")
                && text.lines().any(|l| l.trim() == wanted_group)
                && text.lines().any(|l| l.trim() == wanted_kind)
        })
    })
}

/// `$GOMODCACHE`, else `$GOPATH/pkg/mod`, else `~/go/pkg/mod`.
fn module_cache() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GOMODCACHE").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    if let Some(gopath) = std::env::var_os("GOPATH").filter(|d| !d.is_empty()) {
        let first = std::env::split_paths(&gopath).next()?;
        return Some(first.join("pkg/mod"));
    }
    Some(PathBuf::from(std::env::var_os("HOME")?).join("go/pkg/mod"))
}

/// Go's module cache spells capital letters as `!` + the lowercase letter.
fn escape_module_path(path: &str) -> String {
    path.chars()
        .flat_map(|c| {
            if c.is_ascii_uppercase() {
                vec!['!', c.to_ascii_lowercase()]
            } else {
                vec![c]
            }
        })
        .collect()
}

fn collect_yaml(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 6 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(
                name.as_ref(),
                "vendor" | "testdata" | ".git" | "node_modules"
            ) {
                collect_yaml(&path, depth + 1, out);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_are_escaped_as_go_does() {
        assert_eq!(
            escape_module_path("github.com/Azure/azure-sdk"),
            "github.com/!azure/azure-sdk"
        );
    }

    #[test]
    fn finds_the_crd_of_a_kind_in_a_cached_module() {
        let cache = tempfile::tempdir().unwrap();
        let crds = cache.path().join("example.com/!tides@v0.3.1/deploy/crds");
        std::fs::create_dir_all(&crds).unwrap();
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: tides.example.org\n  names:\n    kind: Forecast\n";
        std::fs::write(crds.join("forecasts.yaml"), crd).unwrap();
        std::fs::write(crds.join("other.yaml"), crd.replace("Forecast", "Surge")).unwrap();
        let found = crd_in(
            cache.path(),
            "example.com/Tides@v0.3.1",
            "tides.example.org",
            "Forecast",
        );
        assert_eq!(found, Some(crds.join("forecasts.yaml")));
        assert_eq!(
            crd_in(
                cache.path(),
                "example.com/Tides@v0.3.1",
                "tides.example.org",
                "Ebb"
            ),
            None
        );
        assert_eq!(
            crd_in(
                cache.path(),
                "example.com/Tides@v0.4.0",
                "tides.example.org",
                "Forecast"
            ),
            None
        );
    }
}
