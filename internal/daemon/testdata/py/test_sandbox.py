"""The E2B calls around the code interpreter that a Python agent makes with
the same SDK (the e2b package under e2b-code-interpreter): connect, info,
timeout, list, files and commands, through both clients.
"""

import pytest
from e2b import CommandExitException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from conftest import Awaited


def connect(sbx, sandbox_id):
    """Sandbox.connect, with the client sbx was made with."""
    if isinstance(sbx, Awaited):
        return Awaited(sbx._loop, sbx._loop.run_until_complete(AsyncSandbox.connect(sandbox_id)))
    return Sandbox.connect(sandbox_id)


def test_info_and_connect(sbx):
    assert sbx.is_running()
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    sbx.set_timeout(200)
    assert sbx.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
    again = connect(sbx, sbx.sandbox_id)
    # The same sandbox, its interpreter's state with it.
    sbx.run_code("shared = 7")
    assert again.run_code("shared * 6").text == "42"


def test_files_and_commands(sbx):
    # airlock's files API reaches the workspace only.
    sbx.files.write("/workspace/note.txt", "from the host")
    assert sbx.files.read("/workspace/note.txt") == "from the host"
    assert "note.txt" in [e.name for e in sbx.files.list("/workspace")]
    # The interpreter reads what the files API wrote, and the other way.
    assert sbx.run_code("open('note.txt').read()").text == "'from the host'"
    sbx.run_code("open('made.txt', 'w').write('by code')")
    assert sbx.files.read("/workspace/made.txt") == "by code"
    r = sbx.commands.run("id -u; cat note.txt")
    assert (r.exit_code, r.stdout) == (0, "1000\nfrom the host")
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo no >&2; exit 3")
    assert e.value.exit_code == 3 and e.value.stderr == "no\n"


def test_file_entries(sbx):
    # envd 0.6.4's descriptions, which the SDK gates on the version
    # airlock answers with: metadata kept as user.e2b.* attributes.
    w = sbx.files.write("/workspace/m.txt", "meta", metadata={"Owner": "ann"})
    assert w.metadata == {"owner": "ann"}
    i = sbx.files.get_info("/workspace/m.txt")
    assert (i.type.value, i.size, i.mode, i.permissions, i.owner, i.group, i.metadata) == (
        "file", 4, 0o644, "-rw-r--r--", "sandbox", "sandbox", {"owner": "ann"})
    assert i.modified_time.year >= 2025 and i.symlink_target is None
    # A symlink is described by what it resolves to.
    sbx.commands.run("cd /workspace && mkdir -p ld && ln -sf m.txt lm && ln -sfn ld ll && ln -sf gone lg")
    got = {n: sbx.files.get_info(f"/workspace/{n}") for n in ("lm", "ll", "lg")}
    assert [(e.type and e.type.value, e.symlink_target, e.permissions) for e in got.values()] == [
        ("file", "/workspace/m.txt", "Lrwxrwxrwx"),
        ("dir", "/workspace/ld", "Lrwxrwxrwx"),
        (None, "/workspace/lg", "Lrwxrwxrwx"),
    ]
    # envd's order, and removing what is not there answers quietly.
    sbx.commands.run("mkdir -p /workspace/s/b && touch /workspace/s/c /workspace/s/b/a /workspace/s/a")
    assert [e.path for e in sbx.files.list("/workspace/s", depth=2)] == [
        "/workspace/s/a", "/workspace/s/b", "/workspace/s/b/a", "/workspace/s/c"]
    sbx.files.remove("/workspace/not-there")
