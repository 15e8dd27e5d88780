#!/usr/bin/env python3
"""Writes a one-layer docker-archive image that `ctr images import` takes, from files or a root
folder, with no registry and no container engine:

    mkimg.py OUT.tar NAME:TAG ENTRYPOINT [--env=K=V]... [--user=UID] [--stop-signal=SIG] SRC[:DST] ...

SRC alone lands at /basename(SRC); SRC:DST at DST; a folder with DST "/" becomes the root.
Owners are root and times zero, so the same inputs give the same image."""
import hashlib
import io
import json
import os
import sys
import tarfile


def norm(info):
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def main():
    out, ref, entry, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    env = [a[len("--env="):] for a in rest if a.startswith("--env=")]
    user = next((a[len("--user="):] for a in rest if a.startswith("--user=")), None)
    stop = next((a[len("--stop-signal="):] for a in rest if a.startswith("--stop-signal=")), None)
    sources = [a for a in rest if not a.startswith("--")]
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for source in sources:
            src, _, dst = source.partition(":")
            dst = (dst or "/" + os.path.basename(src)).lstrip("/")
            if dst == "":
                for name in sorted(os.listdir(src)):
                    layer.add(os.path.join(src, name), arcname=name, filter=norm)
            else:
                layer.add(src, arcname=dst, filter=norm)
    data = layer_bytes.getvalue()
    layer_sha = hashlib.sha256(data).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {k: v for k, v in {
            "Entrypoint": [entry] if entry else None,
            "Env": env or None,
            "User": user,
            "StopSignal": stop,
        }.items() if v is not None},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_sha]},
    }).encode()
    config_sha = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{
        "Config": config_sha + ".json",
        "RepoTags": [ref],
        "Layers": [layer_sha + "/layer.tar"],
    }]).encode()
    with tarfile.open(out, "w") as archive:
        for name, blob in ((config_sha + ".json", config), (layer_sha + "/layer.tar", data),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            archive.addfile(info, io.BytesIO(blob))


if __name__ == "__main__":
    main()
