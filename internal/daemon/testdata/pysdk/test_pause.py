"""Pause and resume through E2B's Python SDK, both clients: pause, then
connect (the same process and its memory, the files); a second pause
answers False; auto-pause on timeout, then a resume on traffic
(auto_resume) and on connect; refusals of what airlock does not do
(a pause that keeps only the files).
"""

import pytest
from e2b import FileNotFoundException, SandboxException, SandboxState

# The sandboxes here outlive a test only by its failure; each test kills
# its own.


def counter(sbx):
    """Starts a process that keeps a count in its memory and writes it,
    with its pid, to /tmp/count (whole, by a rename) every 50ms."""
    sbx.commands.run(
        "sh -c 'n=0; while :; do n=$((n+1)); echo $n $$ > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.05; done' >/dev/null 2>&1 &",
    )


def read_count(sbx):
    n, pid = sbx.files.read("/tmp/count").split()
    return int(n), pid


def counted(sbx, above):
    """Whether the count is past above (False while there is none yet)."""
    try:
        return read_count(sbx)[0] > above
    except FileNotFoundException:
        return False


def test_pause_then_connect(client):
    sbx = client.create(timeout=120)
    try:
        sbx.files.write("/tmp/kept.txt", "files survive a pause")
        counter(sbx)
        assert client.until(lambda: counted(sbx, 3))
        assert sbx.pause() is True
        assert sbx.get_info().state == SandboxState.PAUSED
        # Paused again: the SDK reads the 409 as "was paused already".
        assert sbx.pause() is False
        with pytest.raises(Exception):
            sbx.commands.run("true")
        listed = {i.sandbox_id: i.state for i in client.list().next_items()}
        assert listed.get(sbx.sandbox_id) == SandboxState.PAUSED

        again = client.connect(sbx.sandbox_id, timeout=60)
        assert again.get_info().state == SandboxState.RUNNING
        n, pid = read_count(again)
        assert client.until(lambda: counted(again, n))
        # The same process, its count going on from its memory.
        assert read_count(again)[1] == pid
        assert again.files.read("/tmp/kept.txt") == "files survive a pause"
    finally:
        sbx.kill()


def test_auto_pause_and_resume(client):
    sbx = client.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        assert sbx.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
        counter(sbx)
        assert client.until(lambda: sbx.get_info().state == SandboxState.PAUSED, seconds=10)
        # Traffic resumes it: a command runs, the counter goes on.
        r = sbx.commands.run("cat /tmp/count")
        n, pid = r.stdout.split()
        assert sbx.get_info().state == SandboxState.RUNNING
        assert client.until(lambda: counted(sbx, int(n)))
        assert read_count(sbx)[1] == pid
    finally:
        sbx.kill()


def test_auto_pause_then_connect(client):
    sbx = client.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        sbx.files.write("/tmp/note", "before the timeout")
        assert client.until(lambda: sbx.get_info().state == SandboxState.PAUSED, seconds=10)
        # Without auto_resume traffic does not wake it.
        with pytest.raises(Exception):
            sbx.commands.run("true")
        assert sbx.get_info().state == SandboxState.PAUSED
        again = client.connect(sbx.sandbox_id, timeout=30)
        assert again.files.read("/tmp/note") == "before the timeout"
        assert again.commands.run("echo up").stdout == "up\n"
    finally:
        sbx.kill()


def test_files_only_pause_refused(client):
    sbx = client.create(timeout=60)
    try:
        with pytest.raises(SandboxException) as e:
            sbx.pause(mode="filesystem")
        assert "keeps only the files" in str(e.value)
        assert sbx.get_info().state == SandboxState.RUNNING
        with pytest.raises(SandboxException) as e:
            client.create(timeout=60, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
        assert "autoPauseMemory" in str(e.value)
    finally:
        sbx.kill()
