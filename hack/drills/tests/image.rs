//! The manager's container image, built without Docker (`make oci-image`: a static build of the golden
//! project written as an OCI image layout by hack/oci-image.py), read back the way a container runtime
//! reads it: index → manifest → config and layer, every blob checked against its sha256 digest. It
//! must match what the project's Dockerfile (`make docker-build`) promises: run as the non-root user
//! 65532, `/manager` as the entrypoint, nothing in the file system but the manager and the few files
//! a non-root user needs (no shell), and the manager must start from the extracted layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The environment variable naming the OCI image layout directory (`make test-drills` passes it).
const IMAGE_ENV: &str = "DRILLS_IMAGE";
const DOCKERFILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/project/Dockerfile"
);

#[test]
fn the_image_runs_the_static_manager_as_non_root_without_a_shell() {
    let layout = std::env::var_os(IMAGE_ENV).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{IMAGE_ENV} is not set\nhelp: run `make test-drills` (it builds the image with `make oci-image`)")
    });
    let layout_file: Value = json(&std::fs::read(layout.join("oci-layout")).unwrap());
    assert_eq!(layout_file["imageLayoutVersion"], "1.0.0");

    // index → manifest → config and layer, each by its digest.
    let index: Value = json(&std::fs::read(layout.join("index.json")).unwrap());
    let manifests = index["manifests"]
        .as_array()
        .expect("index.json lists manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    let manifest: Value = json(&blob(&layout, &manifests[0]));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config: Value = json(&blob(&layout, &manifest["config"]));
    let layers = manifest["layers"]
        .as_array()
        .expect("the manifest lists layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer_gz = blob(&layout, &layers[0]);

    // The config: what `USER` and `ENTRYPOINT` in the Dockerfile say.
    let (os, arch) = (&config["os"], &config["architecture"]);
    assert_eq!(
        (os.as_str(), arch.as_str()),
        (Some("linux"), Some("amd64")),
        "{config}"
    );
    let run = &config["config"];
    let user = run["User"].as_str().expect("a User");
    assert!(user == "65532" || user == "65532:65532", "User {user}");
    let entrypoint: Vec<&str> = run["Entrypoint"]
        .as_array()
        .expect("an Entrypoint")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(entrypoint, ["/manager"]);
    let dockerfile = std::fs::read_to_string(DOCKERFILE).unwrap();
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).collect();
    assert!(
        lines.contains(&format!("USER {user}").as_str()),
        "{DOCKERFILE} runs as {user}"
    );
    assert!(
        lines.contains(&r#"ENTRYPOINT ["/manager"]"#),
        "{DOCKERFILE} has the same entrypoint"
    );

    // The layer: its uncompressed digest is the config's diff_id; its files are few.
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let layer_path = dir.join("layer.tar.gz");
    std::fs::write(&layer_path, &layer_gz).unwrap();
    let layer = run_ok(Command::new("gzip").arg("-dc").arg(&layer_path));
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        sha256(&layer),
        "the diff_id"
    );
    let listing = String::from_utf8(run_ok(
        Command::new("tar")
            .args(["--numeric-owner", "-tvzf"])
            .arg(&layer_path),
    ))
    .unwrap();
    let files: BTreeSet<&str> = listing
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().trim_end_matches('/'))
        .collect();
    let expected = BTreeSet::from([
        "etc",
        "etc/group",
        "etc/passwd",
        "home",
        "home/nonroot",
        "manager",
        "tmp",
    ]);
    assert_eq!(
        files, expected,
        "the image's files (no shell, no bin/):\n{listing}"
    );
    let manager_line = listing.lines().find(|l| l.ends_with(" manager")).unwrap();
    assert!(
        manager_line.starts_with("-rwxr-xr-x 0/0 "),
        "the manager is root's, not writable by the user it runs as: {manager_line}"
    );

    // Extracted, the manager is static (no program interpreter) and starts.
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(&layer_path)
            .arg("-C")
            .arg(&rootfs)
            .arg("--no-same-owner"),
    );
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    let uid = user.split(':').next().unwrap();
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
        "/etc/passwd names the user {uid}: {passwd}"
    );
    let manager = rootfs.join("manager");
    assert!(
        !has_interpreter(&std::fs::read(&manager).unwrap()),
        "the manager is linked statically"
    );
    let help = Command::new(&manager)
        .arg("--help")
        .env_clear()
        .current_dir(&rootfs)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "/manager --help: {help:?}");
    assert!(
        text.contains("--leader-elect") && text.contains("--metrics-bind-address"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!(
        "image: {} layer {:.1} MB ({:.1} MB uncompressed), user {user}, entrypoint {entrypoint:?}",
        manifests[0]["digest"].as_str().unwrap(),
        layer_gz.len() as f64 / 1e6,
        layer.len() as f64 / 1e6
    );
}

/// The blob a descriptor points to, checked against its digest and size.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().expect("a digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap();
    assert_eq!(sha256(&bytes), digest, "the blob's content");
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(bytes.len() as u64),
        "{digest}'s size"
    );
    bytes
}

fn sha256(bytes: &[u8]) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("JSON")
}

fn run_ok(command: &mut Command) -> Vec<u8> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?} failed: {stderr}");
    out.stdout
}

/// Whether a 64-bit ELF file has a PT_INTERP program header: a dynamic loader it needs at run time.
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "an ELF file");
    let number = |at: usize, len: usize| {
        let mut buf = [0u8; 8];
        buf[..len].copy_from_slice(&elf[at..at + len]);
        u64::from_le_bytes(buf) as usize
    };
    let (phoff, phentsize, phnum) = (number(0x20, 8), number(0x36, 2), number(0x38, 2));
    const PT_INTERP: usize = 3;
    (0..phnum).any(|i| number(phoff + i * phentsize, 4) == PT_INTERP)
}
