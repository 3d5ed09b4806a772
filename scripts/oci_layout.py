#!/usr/bin/env python3
"""Writes an OCI image layout of one root file system, without a container engine.

    oci_layout.py ROOTFS LAYOUT --architecture ARCH [--variant V] --tag TAG
                  [--entrypoint JSON] [--user UID:GID] [--env K=V ...]
                  [--label K=V ...] [--owner PATH=UID:GID ...]

ROOTFS is a directory; every entry goes into one gzip layer, owned by root unless an
--owner names it (that path and everything under it). The layer is reproducible: entries
sorted by name, times set to SOURCE_DATE_EPOCH (default 0), gzip without a name or time,
so the same files give the same digests. LAYOUT gets `oci-layout`, `index.json` (the
manifest, annotated with TAG) and the blobs; the manifest's digest is printed.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rootfs")
    ap.add_argument("layout")
    ap.add_argument("--architecture", required=True)
    ap.add_argument("--variant")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--entrypoint", default=None, help="JSON list")
    ap.add_argument("--user", default=None)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--owner", action="append", default=[], help="PATH=UID:GID (relative to ROOTFS)")
    return ap.parse_args()


def owners(specs):
    table = []
    for spec in specs:
        path, _, ids = spec.partition("=")
        uid, _, gid = ids.partition(":")
        if not path or not uid.isdigit() or not gid.isdigit():
            sys.exit(f"oci_layout: --owner {spec!r}: expected PATH=UID:GID")
        table.append((path.strip("/"), int(uid), int(gid)))
    return table


def owner_of(name, table):
    for path, uid, gid in table:
        if name == path or name.startswith(path + "/"):
            return uid, gid
    return 0, 0


def layer(rootfs, table, epoch):
    """The uncompressed and compressed layer of every entry under rootfs."""
    raw = io.BytesIO()
    names = []
    for top, dirs, files in os.walk(rootfs):
        dirs.sort()
        for entry in sorted(dirs + files):
            names.append(os.path.relpath(os.path.join(top, entry), rootfs))
    names.sort()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = os.path.join(rootfs, name)
            info = tar.gettarinfo(path, arcname=name)
            info.uid, info.gid = owner_of(name, table)
            info.uname = info.gname = ""
            info.mtime = epoch
            if info.isreg():
                with open(path, "rb") as body:
                    tar.addfile(info, body)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, filename="", compresslevel=6) as gz:
        gz.write(data)
    return data, compressed.getvalue()


def main():
    a = parse_args()
    if not os.path.isdir(a.rootfs):
        sys.exit(f"oci_layout: {a.rootfs} is not a directory")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    blobs = os.path.join(a.layout, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)

    def blob(data, media_type):
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, digest), "wb") as out:
            out.write(data)
        return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}

    raw, compressed = layer(a.rootfs, owners(a.owner), epoch)
    layer_desc = blob(compressed, "application/vnd.oci.image.layer.v1.tar+gzip")
    config = {"Env": a.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    if a.entrypoint:
        config["Entrypoint"] = json.loads(a.entrypoint)
    if a.user:
        config["User"] = a.user
    if a.label:
        config["Labels"] = dict(label.split("=", 1) for label in a.label)
    image_config = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        "architecture": a.architecture,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created_by": "multiarch scripts/image", "comment": "Debian packages and the multiarch binary"}],
    }
    if a.variant:
        image_config["variant"] = a.variant
    config_desc = blob(json.dumps(image_config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_desc = blob(json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": a.tag}
    manifest_desc["platform"] = {"architecture": a.architecture, "os": "linux"}
    if a.variant:
        manifest_desc["platform"]["variant"] = a.variant
    with open(os.path.join(a.layout, "oci-layout"), "w") as out:
        json.dump({"imageLayoutVersion": "1.0.0"}, out)
    with open(os.path.join(a.layout, "index.json"), "w") as out:
        json.dump({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": [manifest_desc]}, out)
    print(manifest_desc["digest"])


if __name__ == "__main__":
    main()
