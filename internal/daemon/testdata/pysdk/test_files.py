"""Files through E2B's Python SDK, both clients: read and write as text,
bytes and streams, several files at once, the filesystem calls (list with
depth, exists, make_dir, rename, remove, get_info), a recursive watch,
and the signed download and upload URLs.
"""

import io
import time
from datetime import datetime, timezone

import httpx
import pytest
from e2b import (
    FileType,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
)
from conftest import GVISOR
from e2b.exceptions import FileNotFoundException
from e2b.sandbox.filesystem.filesystem import WriteEntry



def collect(client, stream):
    """The bytes of a stream read (format="stream"), of either client."""
    if not client.is_async:
        return b"".join(stream)

    async def drain():
        return b"".join([c async for c in stream])

    return client.loop.run_until_complete(drain())


def test_text_and_bytes(client, sbx):
    info = sbx.files.write("/workspace/a.txt", "hello file")
    assert (info.name, info.path, info.type) == ("a.txt", "/workspace/a.txt", FileType.FILE)
    assert sbx.files.read("/workspace/a.txt") == "hello file"
    sbx.files.write("/workspace/b.bin", bytes(range(256)))
    got = sbx.files.read("/workspace/b.bin", format="bytes")
    assert isinstance(got, bytearray) and bytes(got) == bytes(range(256))
    assert collect(client, sbx.files.read("/workspace/b.bin", format="stream")) == bytes(range(256))
    # What the files API wrote, a command reads.
    assert sbx.commands.run("cat /workspace/a.txt").stdout == "hello file"
    # An overwrite replaces the whole file.
    sbx.files.write("/workspace/a.txt", "hello")
    assert sbx.files.read("/workspace/a.txt") == "hello"
    sbx.files.write("/workspace/a.txt", "hello file")


def test_file_like_objects(client, sbx):
    # A file-like object is streamed (an octet-stream upload).
    sbx.files.write("/workspace/bio.bin", io.BytesIO(b"\x00binary\xff" * 1000))
    assert bytes(sbx.files.read("/workspace/bio.bin", format="bytes")) == b"\x00binary\xff" * 1000
    sbx.files.write("/workspace/sio.txt", io.StringIO("text stream é"))
    assert sbx.files.read("/workspace/sio.txt") == "text stream é"
    # A multipart upload of a file-like object.
    sbx.files.write("/workspace/mp.txt", io.BytesIO(b"multipart"), use_octet_stream=False)
    assert sbx.files.read("/workspace/mp.txt") == "multipart"


def test_iterable_chunks(client, sbx):
    if client.is_async:

        async def chunks():
            for c in (b"one ", b"two ", b"three"):
                yield c

        data = chunks()
    else:
        data = iter([b"one ", b"two ", b"three"])
    sbx.files.write("/workspace/chunks.txt", data)
    assert sbx.files.read("/workspace/chunks.txt") == "one two three"


def test_gzip(sbx):
    sbx.files.write("/workspace/gz.txt", "zipped" * 1000, gzip=True)
    assert sbx.files.read("/workspace/gz.txt") == "zipped" * 1000
    assert sbx.files.read("/workspace/gz.txt", gzip=True) == "zipped" * 1000


def test_write_files(sbx):
    infos = sbx.files.write_files(
        [
            WriteEntry(path="/workspace/d/a/f.txt", data="A"),
            WriteEntry(path="sub/g.txt", data=b"G"),
            WriteEntry(path="/tmp/t.txt", data=io.BytesIO(b"T")),
        ]
    )
    assert [i.path for i in infos] == ["/workspace/d/a/f.txt", "/workspace/sub/g.txt", "/tmp/t.txt"]
    assert sbx.commands.run("cat /workspace/d/a/f.txt /workspace/sub/g.txt /tmp/t.txt").stdout == "AGT"
    for p in ("../x.txt", "sub/../../z.txt"):
        with pytest.raises(InvalidArgumentException):
            sbx.files.write_files([WriteEntry(path=p, data="no")])
    with pytest.raises(SandboxException, match="read-only"):
        sbx.files.write_files([WriteEntry(path="/etc/y.txt", data="no")])
    r = sbx.commands.run("ls /x.txt /etc/y.txt /z.txt /workspace/x.txt /workspace/z.txt 2>&1 || true")
    assert r.stdout.count("No such file") == 5, r.stdout


def test_read_errors(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/workspace/none")
    # A directory is not a file.
    sbx.files.make_dir("/workspace/adir")
    with pytest.raises(SandboxException):
        sbx.files.read("/workspace/adir")


def test_read_outside(sbx):
    # As E2B's, the files API reads the whole filesystem as the user; a
    # read-only root (a tool's without rootfs: writable) is read, listed
    # and described, never written.
    assert "root:" in sbx.files.read("/etc/passwd")
    assert "passwd" in [e.name for e in sbx.files.list("/etc")]
    assert sbx.files.get_info("/etc/passwd").type.value == "file"
    for write in (
        lambda: sbx.files.write("/etc/new.txt", "no"),
        lambda: sbx.files.make_dir("/etc/newdir"),
        lambda: sbx.files.remove("/etc/passwd"),
        lambda: sbx.files.rename("/etc/passwd", "/etc/passwd2"),
    ):
        with pytest.raises(SandboxException, match="read-only"):
            write()
    assert sbx.files.exists("/etc/new.txt") is False


def test_exists_make_dir_rename(sbx):
    sbx.files.write("/workspace/m.txt", "move me")
    assert sbx.files.exists("/workspace/m.txt") is True
    assert sbx.files.exists("/workspace/none") is False
    assert sbx.files.make_dir("/workspace/dir/sub") is True
    assert sbx.files.make_dir("/workspace/dir/sub") is False
    assert sbx.files.make_dir("/workspace") is False
    moved = sbx.files.rename("/workspace/m.txt", "/workspace/dir/m.txt")
    assert (moved.name, moved.path, moved.type) == ("m.txt", "/workspace/dir/m.txt", FileType.FILE)
    assert sbx.files.exists("/workspace/m.txt") is False
    assert sbx.files.read("/workspace/dir/m.txt") == "move me"
    with pytest.raises(NotFoundException):
        sbx.files.rename("/workspace/none", "/workspace/none2")


def test_get_info(sbx):
    sbx.files.write("/workspace/info.txt", "0123456789")
    sbx.commands.run("chmod 640 /workspace/info.txt")
    fi = sbx.files.get_info("/workspace/info.txt")
    assert (fi.name, fi.type, fi.size, fi.path) == ("info.txt", FileType.FILE, 10, "/workspace/info.txt")
    assert (fi.owner, fi.group, fi.permissions, fi.mode) == ("sandbox", "sandbox", "-rw-r-----", 0o640)
    assert abs((datetime.now(timezone.utc) - fi.modified_time).total_seconds()) < 60
    assert fi.symlink_target is None
    d = sbx.files.get_info("/workspace/dir")
    assert (d.name, d.type) == ("dir", FileType.DIR)
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("/workspace/none")


def test_remove(sbx):
    sbx.files.write("/workspace/rm/x.txt", "x")
    sbx.files.remove("/workspace/rm/x.txt")
    assert sbx.files.exists("/workspace/rm/x.txt") is False
    sbx.files.write("/workspace/rm/y/z.txt", "z")
    sbx.files.remove("/workspace/rm")
    assert sbx.files.exists("/workspace/rm") is False


def test_remove_missing(sbx):
    # envd calls os.RemoveAll, which answers nothing for a missing path.
    sbx.files.remove("/workspace/never-there")
    sbx.files.remove("/workspace/never/there")


@pytest.fixture(scope="module")
def tree(sbx):
    sbx.commands.run("mkdir -p /workspace/tree/b/y /workspace/tree/a/x && touch /workspace/tree/c.txt /workspace/tree/a/x/f.txt /workspace/tree/a/e.txt /workspace/tree/b/y/g.txt")
    return "/workspace/tree"


def test_list(sbx, tree):
    got = {(e.name, e.type, e.path) for e in sbx.files.list(tree)}
    assert got == {("a", FileType.DIR, tree + "/a"), ("b", FileType.DIR, tree + "/b"), ("c.txt", FileType.FILE, tree + "/c.txt")}
    assert sorted(e.path for e in sbx.files.list(tree, depth=2)) == [
        tree + p for p in ["/a", "/a/e.txt", "/a/x", "/b", "/b/y", "/c.txt"]
    ]
    assert len(sbx.files.list(tree, depth=3)) == 8
    with pytest.raises(InvalidArgumentException):
        sbx.files.list(tree, depth=0)
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/workspace/none")


def test_list_order(sbx, tree):
    # envd walks with filepath.WalkDir: by name, each directory followed
    # by what is below it.
    assert [e.path[len(tree) :] for e in sbx.files.list(tree, depth=3)] == [
        "/a", "/a/e.txt", "/a/x", "/a/x/f.txt", "/b", "/b/y", "/b/y/g.txt", "/c.txt"
    ]


def test_symlink(sbx):
    sbx.commands.run("ln -sfn /etc /workspace/evil && ln -sfn dir /workspace/rel")
    # A link the sandbox planted is never followed out of its directories
    # (airlock's rule, documented; E2B's envd follows it).
    with pytest.raises(InvalidArgumentException, match="symlink"):
        sbx.files.list("/workspace/evil")
    with pytest.raises(InvalidArgumentException, match="symlink"):
        sbx.files.get_info("/workspace/evil/passwd")
    with pytest.raises(InvalidArgumentException, match="symlink"):
        sbx.files.read("/workspace/evil/passwd")


def test_symlink_target(sbx):
    # envd gives symlink_target as the resolved absolute path
    # (filepath.EvalSymlinks), and the type and mode of its target; a link
    # that resolves to nothing, its own path and no type.
    sbx.commands.run("ln -sfn dir /workspace/rel && ln -sfn nowhere /workspace/dangling")
    fi = sbx.files.get_info("/workspace/rel")
    assert (fi.symlink_target, fi.type, fi.mode, fi.permissions) == ("/workspace/dir", FileType.DIR, 0o755, "Lrwxrwxrwx")
    fi = sbx.files.get_info("/workspace/dangling")
    assert (fi.symlink_target, fi.type, fi.mode) == ("/workspace/dangling", None, 0)


def test_metadata(sbx):
    # Kept as the file's user.e2b.* attributes, keys lowercased, replaced
    # by the next upload.
    w = sbx.files.write("/workspace/meta.txt", "m", metadata={"K": "v"})
    assert w.metadata == {"k": "v"}
    assert sbx.files.get_info("/workspace/meta.txt").metadata == {"k": "v"}
    assert [e.metadata for e in sbx.files.list("/workspace") if e.name == "meta.txt"] == [{"k": "v"}]
    assert sbx.files.write("/workspace/meta.txt", "again").metadata is None
    assert sbx.files.get_info("/workspace/meta.txt").metadata is None


def test_urls(client, sbx):
    sbx.files.write("/workspace/url.txt", "hello url")
    url = sbx.download_url("/workspace/url.txt")
    assert "signature=" in url
    r = httpx.get(url)
    assert (r.status_code, r.text) == (200, "hello url")
    r = httpx.get(sbx.download_url("/workspace/url.txt", use_signature_expiration=60))
    assert (r.status_code, r.text) == (200, "hello url")
    up = sbx.upload_url("/workspace/up.txt")
    r = httpx.post(up, files={"file": ("up.txt", b"uploaded")})
    assert r.status_code == 200, r.text
    assert sbx.files.read("/workspace/up.txt") == "uploaded"
    # A URL is for its operation and path alone.
    assert httpx.get(up).status_code != 200
    r = httpx.post(url, files={"file": ("url.txt", b"overwritten")})
    assert r.status_code != 200
    assert sbx.files.read("/workspace/url.txt") == "hello url"


def test_expired_url(sbx):
    url = sbx.download_url("/workspace/url.txt", use_signature_expiration=-10)
    r = httpx.get(url)
    assert r.status_code == 401 and "expired" in r.text


def test_watch(client, sbx):
    sbx.files.make_dir("/workspace/w")
    seen = []
    cmd = "cd /workspace/w && echo x > f.txt && mkdir d && sleep 0.3 && echo y > d/g.txt && mv f.txt h.txt && rm h.txt"
    if client.is_async:
        wh = sbx.files.watch_dir("/workspace/w", lambda e: seen.append(f"{e.type.value}:{e.name}"), recursive=True)
        sbx.commands.run(cmd)
        client.until(lambda: "remove:h.txt" in seen)
        wh.stop()
    else:
        wh = sbx.files.watch_dir("/workspace/w", recursive=True)
        sbx.commands.run(cmd)
        deadline = time.monotonic() + 5
        while "remove:h.txt" not in seen and time.monotonic() < deadline:
            seen += [f"{e.type.value}:{e.name}" for e in wh.get_new_events()]
            time.sleep(0.05)
        wh.stop()
    if GVISOR:
        # gVisor's gofer makes a file and then sets its mode: a chmod
        # event follows each create.
        seen = [e for e in seen if not e.startswith("chmod:")]
    seen = [e for i, e in enumerate(seen) if i == 0 or e != seen[i - 1]]
    assert seen == ["create:f.txt", "write:f.txt", "create:d", "create:d/g.txt", "write:d/g.txt", "rename:f.txt", "create:h.txt", "remove:h.txt"]


def test_watch_refused(client, sbx):
    # The async client streams its events to a callback; the sync one
    # polls a watcher.
    def watch(p):
        return sbx.files.watch_dir(p, lambda e: None) if client.is_async else sbx.files.watch_dir(p)

    with pytest.raises(InvalidArgumentException, match="symlink"):
        watch("/workspace/evil")
    with pytest.raises(FileNotFoundException):
        watch("/workspace/none")


def test_watch_include_entry(client, sbx):
    # The entry of each create, write and chmod; none for a remove.
    sbx.files.make_dir("/workspace/we")
    seen = []

    def show(e):
        return f"{e.type.value}:{e.name}:" + (f"{e.entry.type.value} {e.entry.path} {e.entry.permissions}" if e.entry else "-")

    cmd = "cd /workspace/we && echo x > f.txt && sleep 0.3 && chmod 600 f.txt && sleep 0.3 && rm f.txt"
    if client.is_async:
        wh = sbx.files.watch_dir("/workspace/we", lambda e: seen.append(show(e)), include_entry=True, allow_network_mounts=True)
        sbx.commands.run(cmd)
        client.until(lambda: any(e.startswith("remove:") for e in seen))
        wh.stop()
    else:
        wh = sbx.files.watch_dir("/workspace/we", include_entry=True, allow_network_mounts=True)
        sbx.commands.run(cmd)
        deadline = time.monotonic() + 5
        while not any(e.startswith("remove:") for e in seen) and time.monotonic() < deadline:
            seen += [show(e) for e in wh.get_new_events()]
            time.sleep(0.05)
        wh.stop()
    if GVISOR:
        # The chmod that follows the gofer's create (see test_watch).
        seen = [e for i, e in enumerate(seen) if not (e.startswith("chmod:") and i > 0 and seen[i - 1].startswith("create:"))]
    seen = [e for i, e in enumerate(seen) if i == 0 or e != seen[i - 1]]
    assert seen == [
        "create:f.txt:file /workspace/we/f.txt -rw-r--r--",
        "write:f.txt:file /workspace/we/f.txt -rw-r--r--",
        "chmod:f.txt:file /workspace/we/f.txt -rw-------",
        "remove:f.txt:-",
    ]
