# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""A mirror: an http(s) base URL or an absolute path holding a model revision's files at their paths - a shared
file system, a web server of the site, or a host of the cluster serving its staged directory (a peer). Files are
copied into the temporary directory and resumed: what an interrupted copy left (`<path>.incomplete`) is continued
from its size (an HTTP Range), then renamed to the file's name. The manifest comes with the source (the holder's,
as the first host staged it from the hub) or from the mirror: `<mirror>/.disagg-model.json`, a staged directory's
stamp.

    file_url(mirror, path)      where one file is
    copy(open_range, part_path, final_path)
                                one file: open_range(offset) -> (start, chunks), start being where the chunks
                                begin (0 when a server ignored the Range: the part is then started again)
"""

import os
from urllib.parse import quote

INCOMPLETE = ".incomplete"
CHUNK = 8 << 20


def is_url(mirror):
    return str(mirror).startswith(("http://", "https://"))


def file_url(mirror, path):
    base = str(mirror).rstrip("/")
    return f"{base}/{quote(path)}" if is_url(mirror) else os.path.join(base, path)


def copy(open_range, part_path, final_path):
    """Continue part_path from its size, then rename it to final_path. Returns the bytes read."""
    offset = os.path.getsize(part_path) if os.path.exists(part_path) else 0
    start, chunks = open_range(offset)
    got = 0
    with open(part_path, "r+b" if os.path.exists(part_path) else "wb") as out:
        out.seek(start)
        out.truncate()
        for chunk in chunks:
            out.write(chunk)
            got += len(chunk)
    os.replace(part_path, final_path)
    return got


def file_chunks(path, offset):
    """(offset, chunks) of a file of a mirror on a file system."""

    def chunks():
        with open(path, "rb") as handle:
            handle.seek(offset)
            while True:
                data = handle.read(CHUNK)
                if not data:
                    return
                yield data

    return offset, chunks()
