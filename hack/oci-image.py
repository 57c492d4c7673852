#!/usr/bin/env python3
"""Writes a manager's container image as an OCI image layout, without Docker or a registry.

The image is what the generated Dockerfile builds (`make docker-build`): one static binary at
/manager on an otherwise empty file system, run as the non-root user 65532:65532, with /manager as
the entrypoint. Like gcr.io/distroless/static:nonroot it also carries /etc/passwd and /etc/group
naming that user, and a writable /tmp; unlike it, no CA bundle or time zones (the manager trusts the
cluster's CA from its service-account mount). There is no shell, no package manager, nothing else.

    python3 hack/oci-image.py --binary target/x86_64-unknown-linux-gnu/release/project \\
        --output bin/oci/project --tag project:latest

The output is an OCI image layout (oci-layout, index.json, blobs/sha256/...): `skopeo copy
oci:bin/oci/project:project:latest docker://REGISTRY/project:TAG` pushes it, `podman load` and
`ctr image import` read it as a tar (`--archive`). The same inputs give the same bytes: file times
are zero and the layer is gzip-compressed without a name or time, so the digests are reproducible.

Only Python's standard library is used.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

USER = "65532:65532"
ENTRYPOINT = "/manager"
PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = "root:x:0:\nnonroot:x:65532:\n"

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the static manager binary")
    parser.add_argument("--output", required=True, help="the OCI image layout directory (replaced)")
    parser.add_argument("--tag", default="latest", help="the image's name in index.json (default: latest)")
    parser.add_argument("--archive", help="also write the layout as this tar file")
    args = parser.parse_args()

    binary = open(args.binary, "rb").read()
    if binary[:4] != b"\x7fELF":
        return fail(f"{args.binary} is not an ELF binary", "pass the manager built for Linux")
    if interpreter(binary):
        return fail(
            f"{args.binary} is dynamically linked: the image has no C library to load it with",
            'build it static: RUSTFLAGS="-C target-feature=+crt-static" cargo build --release '
            "--target x86_64-unknown-linux-gnu (or a musl target)",
        )

    layer = layer_tar(binary)
    layer_gz = gzip_bytes(layer)
    config = canonical({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": [ENTRYPOINT],
            "WorkingDir": "/",
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
        "history": [{"created_by": "hack/oci-image.py: the manager, /etc/passwd, /etc/group, /tmp"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": descriptor(MEDIA_CONFIG, config),
        "layers": [descriptor(MEDIA_LAYER, layer_gz)],
    })
    index = canonical({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            dict(descriptor(MEDIA_MANIFEST, manifest),
                 annotations={"org.opencontainers.image.ref.name": args.tag})
        ],
    })

    if os.path.exists(args.output):
        shutil.rmtree(args.output)
    blobs = os.path.join(args.output, "blobs", "sha256")
    os.makedirs(blobs)
    for blob in (layer_gz, config, manifest):
        write(os.path.join(blobs, digest(blob).split(":")[1]), blob)
    write(os.path.join(args.output, "oci-layout"), canonical({"imageLayoutVersion": "1.0.0"}))
    write(os.path.join(args.output, "index.json"), index)
    if args.archive:
        with tarfile.open(args.archive, "w", format=tarfile.PAX_FORMAT) as archive:
            for root, dirs, files in sorted(os.walk(args.output)):
                dirs.sort()
                for name in sorted(files):
                    path = os.path.join(root, name)
                    info = archive.gettarinfo(path, os.path.relpath(path, args.output))
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    with open(path, "rb") as f:
                        archive.addfile(info, f)
    size = len(layer_gz) / 1e6
    print(f"wrote {args.output} ({args.tag}): {digest(manifest)}, layer {size:.1f} MB, user {USER}, "
          f"entrypoint {ENTRYPOINT}")
    return 0


def interpreter(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF file names a program interpreter (the dynamic loader)."""
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    pt_interp = 3
    return any(
        int.from_bytes(elf[phoff + i * phentsize:phoff + i * phentsize + 4], "little") == pt_interp
        for i in range(phnum)
    )


def layer_tar(binary: bytes) -> bytes:
    """The image's one file-system layer, as an uncompressed tar with fixed owners and times."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode in (("etc", 0o755), ("home", 0o755), ("tmp", 0o1777)):
            tar.addfile(entry(name, tarfile.DIRTYPE, mode))
        tar.addfile(entry("home/nonroot", tarfile.DIRTYPE, 0o700, owner=65532))
        for name, text in (("etc/group", GROUP), ("etc/passwd", PASSWD)):
            data = text.encode()
            tar.addfile(entry(name, tarfile.REGTYPE, 0o644, size=len(data)), io.BytesIO(data))
        # Owned by root and not writable by the user it runs as.
        manager = entry(ENTRYPOINT.lstrip("/"), tarfile.REGTYPE, 0o755, size=len(binary))
        tar.addfile(manager, io.BytesIO(binary))
    return out.getvalue()


def entry(name: str, kind: bytes, mode: int, size: int = 0, owner: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.uid = info.gid = owner
    info.mtime = 0
    return info


def gzip_bytes(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as z:
        z.write(data)
    return out.getvalue()


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes) -> dict:
    return {"mediaType": media_type, "digest": digest(data), "size": len(data)}


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def fail(message: str, help: str) -> int:
    print(f"error: {message}\nhelp: {help}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
