"""Snapshots and forks through E2B's Python SDK, both clients: a named
snapshot, listed; two sandboxes made from it (by the snapshot_id it
answered), each with its files and apart from the other; a fork of two;
what another key (E2B_OTHER_KEY) cannot do with it; its deletion.
"""

import os

import pytest
from e2b import SandboxException

from conftest import Awaited

OTHER = os.environ["E2B_OTHER_KEY"]


def files(sbx):
    return [sbx.files.read("/workspace/a.txt"), sbx.files.read("/tmp/b.txt")]


def listed(client, **opts):
    p = client.cls.list_snapshots(**opts)
    if client.is_async:
        p = Awaited(client.loop, p)
    return [s.snapshot_id for s in p.next_items()]


def delete(client, snapshot_id, **opts):
    return client._run(client.cls.delete_snapshot(snapshot_id, **opts))


def test_snapshot_and_fork(client):
    name = "snap-py-" + ("async" if client.is_async else "sync")
    made = []
    try:
        sbx = client.create(timeout=120, metadata={"who": "source"})
        made.append(sbx)
        sbx.files.write("/workspace/a.txt", "snapped")
        sbx.files.write("/tmp/b.txt", "tmp too")
        snap = sbx.create_snapshot(name=name)
        assert (snap.snapshot_id, snap.names) == (name, [name])
        # The sandbox goes on running.
        assert sbx.commands.run("echo up").stdout == "up\n"
        assert name in listed(client)
        assert listed(client, sandbox_id=sbx.sandbox_id) == [name]
        assert listed(client, name=name) == [name]

        # Another key sees nothing of it.
        assert listed(client, api_key=OTHER) == []
        with pytest.raises(SandboxException) as e:
            made.append(client.create(snap.snapshot_id, api_key=OTHER))
        assert f'no template "{name}"' in str(e.value)
        assert delete(client, snap.snapshot_id, api_key=OTHER) is False

        a = client.create(snap.snapshot_id, timeout=60)
        made.append(a)
        b = client.create(snap.snapshot_id, timeout=60)
        made.append(b)
        assert files(a) == files(b) == ["snapped", "tmp too"]
        a.files.write("/workspace/a.txt", "changed in a")
        assert b.files.read("/workspace/a.txt") == "snapped"

        forks = sbx.fork(count=2, timeout=60)
        ok = [f for f in forks if not isinstance(f, Exception)]
        made.extend(Awaited(client.loop, f) if client.is_async else f for f in ok)
        assert len(ok) == 2, forks
        for f in made[-2:]:
            assert files(f) == ["snapped", "tmp too"]
            info = f.get_info()
            assert info.state.value == "running" and info.metadata == {"who": "source"}
        assert len({sbx.sandbox_id, *(f.sandbox_id for f in ok)}) == 3

        unnamed = sbx.create_snapshot()
        assert unnamed.snapshot_id.startswith("snap_") and unnamed.names == []
        assert delete(client, unnamed.snapshot_id) is True

        assert delete(client, snap.snapshot_id) is True
        assert delete(client, snap.snapshot_id) is False
        assert name not in listed(client)
    finally:
        for s in made:
            try:
                s.kill()
            except Exception:
                pass


def test_full_snapshot_refused(client, sbx):
    # mode "full" asks for the processes and memory too: refused, naming
    # what a snapshot holds.
    with pytest.raises(SandboxException) as e:
        sbx.create_snapshot(mode="full")
    assert "snapshots hold its files" in str(e.value)
    # "filesystem" is what airlock's are.
    snap = sbx.create_snapshot(mode="filesystem")
    assert delete(client, snap.snapshot_id) is True
