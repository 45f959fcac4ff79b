//! The container image, built for real with buildah from the Dockerfile (its `prebuilt` path:
//! this test's kubecast binary and what it links on `scratch`, no registry) and run with
//! buildah's chroot isolation: it holds only the binary, its libraries, the CA bundle and a
//! passwd entry, runs as UID 65532 (which owns only /var/lib/kubecast), and its kubecast
//! answers `--help` and checks a config.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::kubecast::scratch_dir;
use support::repo;

/// Runs `scripts/image ARGS` with the image store in `storage`.
fn image(storage: &Path, args: &[&str]) -> Output {
    Command::new(repo().join("scripts/image"))
        .args(args)
        .env("KUBECAST_IMAGE_STORAGE", storage)
        .output()
        .unwrap_or_else(|e| panic!("running scripts/image: {e}"))
}

/// Runs buildah on the store in `storage`; fails the test if buildah fails.
fn buildah(storage: &Path, args: &[&str]) -> String {
    let out = Command::new("buildah")
        .arg("--root")
        .arg(storage.join("root"))
        .arg("--runroot")
        .arg(storage.join("run"))
        .args(["--storage-driver", "vfs"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running buildah: {e}"));
    assert!(
        out.status.success(),
        "buildah {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every entry under `root` as (absolute path inside it, owner uid, is a directory).
fn files(root: &Path) -> Vec<(String, u32, bool)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let inside = format!("/{}", path.strip_prefix(root).unwrap_or(&path).display());
            out.push((inside, meta.uid(), meta.is_dir()));
            if meta.is_dir() {
                todo.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_image_holds_only_kubecast_runs_it_as_non_root_and_it_answers() {
    let dir = scratch_dir("image");
    let storage = dir.join("storage");
    let tag = "kubecast-test:image";
    let built = image(
        &storage,
        &[
            "build",
            "--binary",
            env!("CARGO_BIN_EXE_kubecast"),
            "--tag",
            tag,
        ],
    );
    assert!(
        built.status.success(),
        "scripts/image build failed:\n{}",
        text(&built)
    );

    // The configuration a runtime starts it with.
    let config: serde_json::Value =
        serde_json::from_str(&buildah(&storage, &["inspect", "--type", "image", tag]))
            .expect("buildah inspect prints JSON");
    let oci = &config["OCIv1"]["config"];
    assert_eq!(oci["User"], "65532:65532", "{oci}");
    assert_eq!(
        oci["Entrypoint"],
        serde_json::json!(["/usr/local/bin/kubecast"])
    );
    assert_eq!(
        oci["Cmd"],
        serde_json::json!(["run", "--config", "/etc/kubecast/kubecast.yaml"])
    );
    assert!(oci["ExposedPorts"].get("9464/tcp").is_some(), "{oci}");

    // What it holds: kubecast, the loader and libraries, the CA bundle, passwd and group.
    let container = buildah(&storage, &["from", tag]);
    let root = PathBuf::from(buildah(&storage, &["mount", &container]));
    let entries = files(&root);
    buildah(&storage, &["umount", &container]);
    buildah(&storage, &["rm", &container]);
    // Root owns everything but the state directory, which is kubecast's alone.
    for (path, uid, _) in &entries {
        let owner = if path == "/var/lib/kubecast" {
            65532
        } else {
            0
        };
        assert_eq!(*uid, owner, "{path} is owned by uid {uid}");
    }
    assert!(
        entries
            .iter()
            .any(|(p, _, dir)| p == "/var/lib/kubecast" && *dir),
        "no state directory /var/lib/kubecast"
    );
    let held: Vec<String> = entries
        .into_iter()
        .filter(|(_, _, dir)| !dir)
        .map(|(p, _, _)| p)
        .collect();
    let allowed = |f: &String| {
        f == "/usr/local/bin/kubecast"
            || f.starts_with("/lib/")
            || f.starts_with("/lib64/ld-linux")
            || f == "/etc/ssl/certs/ca-certificates.crt"
            || f == "/usr/lib/ssl/cert.pem"
            || f == "/etc/passwd"
            || f == "/etc/group"
    };
    let extra: Vec<&String> = held.iter().filter(|f| !allowed(f)).collect();
    assert!(
        extra.is_empty(),
        "the image holds more than kubecast needs: {extra:?}"
    );
    for needed in ["/usr/local/bin/kubecast", "/etc/passwd"] {
        assert!(held.iter().any(|f| f == needed), "no {needed} in {held:?}");
    }
    assert!(
        held.iter().any(|f| f.contains("libssl")),
        "librdkafka's libssl is missing: {held:?}"
    );

    // Its kubecast runs, as the image's user.
    let help = image(&storage, &["run", "--tag", tag, "--", "--help"]);
    assert!(
        help.status.success(),
        "kubecast --help in the image:\n{}",
        text(&help)
    );
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("Usage: kubecast <COMMAND>"),
        "{}",
        text(&help)
    );
    let refused = image(
        &storage,
        &[
            "run",
            "--tag",
            tag,
            "--",
            "validate-config",
            "/etc/kubecast/none.yaml",
        ],
    );
    assert!(
        text(&refused).contains("cannot read config file /etc/kubecast/none.yaml"),
        "{}",
        text(&refused)
    );
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an invalid config exits 2 in the image too:\n{}",
        text(&refused)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
