"""A sandbox's life through E2B's Python SDK, both clients: create with
envs, metadata and a timeout; info, set_timeout, metrics; list by
metadata and in pages; connect from a second client; kill; a memory
breach; a wrong key; an unknown template.
"""

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    SandboxException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
)


TEAM = "t-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def sbx(client):
    s = client.create(envs={"GREETING": "hi"}, metadata={"team": TEAM + client.cls.__name__}, timeout=120)
    yield s
    try:
        s.kill()
    except Exception:
        pass


def team(client):
    return TEAM + client.cls.__name__


def near(t, want, slack=10):
    return abs((t - want).total_seconds()) < slack


def test_created(client, sbx):
    assert sbx.is_running() is True
    assert sbx.commands.run('echo "$GREETING"').stdout == "hi\n"
    info = sbx.get_info()
    assert (info.sandbox_id, info.template_id, info.state) == (sbx.sandbox_id, "sh", SandboxState.RUNNING)
    assert info.metadata == {"team": team(client)}
    now = datetime.now(timezone.utc)
    assert near(info.started_at, now, 30)
    assert near(info.end_at, info.started_at + timedelta(seconds=120), 2)
    assert info.envd_version == "0.6.4"


def test_set_timeout(sbx):
    sbx.set_timeout(60)
    assert near(sbx.get_info().end_at, datetime.now(timezone.utc) + timedelta(seconds=60), 5)
    sbx.set_timeout(120)
    assert near(sbx.get_info().end_at, datetime.now(timezone.utc) + timedelta(seconds=120), 5)


def test_metrics(sbx):
    sbx.get_metrics()
    sbx.commands.run("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
    [m] = sbx.get_metrics()
    assert 0 < m.mem_used < m.mem_total
    assert 0 < m.cpu_used_pct <= 100
    assert m.cpu_count == 1
    assert m.disk_total > 0 and m.disk_used >= 0
    assert near(m.timestamp, datetime.now(timezone.utc), 60)


def test_list_by_metadata(client, sbx):
    p = client.list(query=SandboxQuery(metadata={"team": team(client)}))
    assert [i.sandbox_id for i in p.next_items()] == [sbx.sandbox_id]
    assert p.has_next is False
    assert client.list(query=SandboxQuery(metadata={"team": "nobody"})).next_items() == []
    listed = {i.sandbox_id: i for i in client.list().next_items()}
    i = listed[sbx.sandbox_id]
    assert (i.template_id, i.state, i.metadata) == ("sh", SandboxState.RUNNING, {"team": team(client)})


@pytest.fixture(scope="module")
def pair(client):
    """Two sandboxes of one metadata, made one after the other."""
    meta = {"team": team(client) + "-b"}
    b1 = client.create(metadata=meta)
    time.sleep(0.01)
    b2 = client.create(metadata=meta)
    yield meta, b1.sandbox_id, b2.sandbox_id
    for b in (b1, b2):
        b.kill()


def pages(client, meta, **opts):
    p = client.list(query=SandboxQuery(metadata=meta), limit=1, **opts)
    out = []
    while p.has_next:
        out.append([i.sandbox_id for i in p.next_items()])
    return out


def test_list_pages(client, pair):
    meta, b1, b2 = pair
    got = pages(client, meta)
    assert sorted(got) == sorted([[b1], [b2]])
    # next_token carries a page on to another paginator.
    p = client.list(query=SandboxQuery(metadata=meta), limit=1)
    first = p.next_items()
    assert p.has_next and p.next_token
    rest = client.list(query=SandboxQuery(metadata=meta), limit=1, next_token=p.next_token).next_items()
    assert sorted([first[0].sandbox_id, rest[0].sandbox_id]) == sorted([b1, b2])
    assert pages(client, meta, order="asc") == [[b1], [b2]]


def test_list_newest_first(client, pair):
    meta, b1, b2 = pair
    assert pages(client, meta) == [[b2], [b1]]
    assert pages(client, meta, order="desc") == [[b2], [b1]]


def test_list_by_template(client, pair):
    meta, b1, b2 = pair
    assert client.list(query=SandboxQuery(metadata=meta, template="small")).next_items() == []


def test_list_started_after(client, pair):
    meta, b1, b2 = pair
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert client.list(query=SandboxQuery(metadata=meta, started_after=later)).next_items() == []


def test_connect(client, sbx):
    sbx.files.write("/workspace/shared.txt", "from the first")
    again = client.connect(sbx.sandbox_id)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.commands.run("cat /workspace/shared.txt").stdout == "from the first"
    assert again.files.read("/workspace/shared.txt") == "from the first"
    # A longer timeout given on connect extends the sandbox's life.
    client.connect(sbx.sandbox_id, timeout=200)
    assert near(sbx.get_info().end_at, datetime.now(timezone.utc) + timedelta(seconds=200), 5)


def test_connect_does_not_shorten(client):
    s = client.create(timeout=120)
    try:
        client.connect(s.sandbox_id, timeout=5)
        assert near(s.get_info().end_at, datetime.now(timezone.utc) + timedelta(seconds=120), 5)
    finally:
        client.kill(s.sandbox_id)


def test_kill(client):
    s = client.create()
    assert s.is_running() is True
    assert s.kill() is True
    assert s.is_running() is False
    assert client.kill(s.sandbox_id) is False
    # The sandbox's side answers as E2B's proxy does for a sandbox it does
    # not find; the control plane's, not found.
    with pytest.raises(SandboxNotRunningException):
        s.commands.run("true")
    with pytest.raises(NotFoundException):
        s.get_info()
    with pytest.raises(NotFoundException):
        client.connect(s.sandbox_id)
    assert s.sandbox_id not in [i.sandbox_id for i in client.list().next_items()]


def test_killed_under_a_command(client):
    s = client.create()
    h = s.commands.run("sleep 30", background=True)
    s.kill()
    with pytest.raises(SandboxNotRunningException):
        h.wait()


def test_memory_breach(client):
    small = client.create("small")
    with pytest.raises(CommandExitException) as e:
        small.commands.run("x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}")
    assert e.value.exit_code == -1
    assert "limit exceeded: memory" in e.value.error
    with pytest.raises(SandboxNotRunningException):
        small.commands.run("true")
    assert small.is_running() is False


def test_wrong_key(client):
    with pytest.raises(AuthenticationException):
        client.create(api_key="not-a-key-of-this-daemon")
    with pytest.raises(AuthenticationException):
        client.list(api_key="not-a-key-of-this-daemon").next_items()


def test_unknown_template(client):
    with pytest.raises(SandboxException, match="nosuchtool") as e:
        client.create("nosuchtool")
    assert e.value.status_code in (400, 404)
