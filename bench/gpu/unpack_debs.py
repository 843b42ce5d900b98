"""unpack_debs.py DEBS_DIR ROOT: extracts every .deb's files under ROOT (as
`dpkg-deb -x` would), with nothing but Python: a .deb is an ar archive whose
data.tar.{xz,gz,bz2} holds the files. For machines without dpkg. Then the
packages' CMake files, which name some of their files by absolute /usr/...
paths, are made to name the unpacked copies (where those exist under ROOT)."""
import io
import os
import re
import sys
import tarfile

ABSOLUTE = re.compile(r"(?<![\w/.$}])(/usr/(?:lib|include|bin|share)(?:/[^\s\";)]*)?)")


def relocate_cmake_files(root):
    changed = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".cmake"):
                continue
            path = os.path.join(folder, name)
            text = open(path, encoding="utf-8", errors="surrogateescape").read()
            new = ABSOLUTE.sub(
                lambda m: root + m[1] if os.path.exists(root + m[1]) else m[1], text)
            if new != text:
                open(path, "w", encoding="utf-8", errors="surrogateescape").write(new)
                changed += 1
    return changed


def members(path):
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError("%s is not a .deb (no ar header)" % path)
        while True:
            header = f.read(60)
            if len(header) < 60:
                return
            name = header[:16].decode().strip().rstrip("/")
            size = int(header[48:58].decode().strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            yield name, data


def main(debs, root):
    count = 0
    for deb in sorted(os.listdir(debs)):
        if not deb.endswith(".deb"):
            continue
        for name, data in members(os.path.join(debs, deb)):
            if name.startswith("data.tar"):
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
                    try:  # Debian's own packages: trusted as dpkg trusts them
                        tar.extractall(root, filter="fully_trusted")
                    except TypeError:  # a Python before extraction filters
                        tar.extractall(root)
                count += 1
    root = os.path.abspath(root)
    print("unpacked %d packages into %s; %d CMake files now name the files there"
          % (count, root, relocate_cmake_files(root)))
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
