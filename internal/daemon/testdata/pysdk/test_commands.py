"""Commands through E2B's Python SDK, both clients: the foreground and the
background, output callbacks, envs, cwd, exit codes, a command's timeout
and kill, stdin, connecting to a running command, listing them.
"""

import time

import pytest
from e2b import CommandExitException, SandboxException, TimeoutException



@pytest.fixture(scope="module")
def sbx(client):
    s = client.create(envs={"GREETING": "hi"}, timeout=120)
    yield s
    try:
        s.kill()
    except Exception:
        pass


def test_envs_cwd_stderr(sbx):
    r = sbx.commands.run('echo "$GREETING $EXTRA"; pwd; echo err >&2', envs={"EXTRA": "there"}, cwd="/tmp")
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("hi there\n/tmp\n", "err\n", 0, None)


def test_callbacks(sbx):
    out, err = [], []
    r = sbx.commands.run(
        "for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.1; done",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert "".join(out) == "1\n2\n3\n" == r.stdout
    assert "".join(err) == "e1\ne2\ne3\n" == r.stderr
    # Each line as the command wrote it, not all at the end.
    assert len(out) == 3


def test_exit_code(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; echo no >&2; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.stderr) == (3, "partial\n", "no\n")
    assert "exit status 3" in e.value.error


def test_timeout(client, sbx):
    began = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=0.5)
    assert time.monotonic() - began < 10
    # The sandbox goes on.
    assert sbx.commands.run("echo alive").stdout == "alive\n"


def test_background_list_kill(client, sbx):
    h = sbx.commands.run("sleep 30", background=True, timeout=0)
    listed = {p.pid: p for p in sbx.commands.list()}
    assert h.pid in listed
    p = listed[h.pid]
    assert (p.cmd, p.args) == ("/bin/bash", ["-l", "-c", "sleep 30"])
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert "signal: SIGKILL" in e.value.error
    # Gone from the list once ended (just after its end is sent), and
    # not killed again.
    assert client.until(lambda: h.pid not in [p.pid for p in sbx.commands.list()])
    assert sbx.commands.kill(h.pid) is False


def test_handle_kill(sbx):
    h = sbx.commands.run("sleep 30", background=True)
    assert h.kill() is True
    with pytest.raises(CommandExitException):
        h.wait()


def test_background_callbacks(client, sbx):
    out = []
    cmd = "for i in 1 2 3; do echo $i; sleep 0.05; done"
    if client.is_async:
        # The async client takes the callbacks when it starts the command
        # and calls them as the output comes.
        h = sbx.commands.run(cmd, background=True, on_stdout=out.append)
        assert client.until(lambda: "".join(out) == "1\n2\n3\n")
        r = h.wait()
    else:
        # The sync client takes them when it waits.
        h = sbx.commands.run(cmd, background=True)
        r = h.wait(on_stdout=out.append)
    assert "".join(out) == "1\n2\n3\n" == r.stdout


def test_connect(client, sbx):
    bg = sbx.commands.run('read x; echo "got $x"; sleep 0.2; echo later', background=True, stdin=True)
    seen = []
    if client.is_async:
        again = sbx.commands.connect(bg.pid, on_stdout=seen.append)
        sbx.commands.send_stdin(bg.pid, "one\n")
        r = again.wait()
    else:
        again = sbx.commands.connect(bg.pid)
        sbx.commands.send_stdin(bg.pid, "one\n")
        r = again.wait(on_stdout=seen.append)
    assert "".join(seen) == "got one\nlater\n"
    assert r.exit_code == 0
    # The first handle sees the end too.
    assert bg.wait().stdout == "got one\nlater\n"


def test_stdin(sbx):
    cat = sbx.commands.run("cat; echo end", background=True, stdin=True)
    sbx.commands.send_stdin(cat.pid, "typed in\n")
    cat.send_stdin(b"bytes too\n")
    sbx.commands.close_stdin(cat.pid)
    assert cat.wait().stdout == "typed in\nbytes too\nend\n"


def test_stdin_closed_by_handle(sbx):
    cat = sbx.commands.run("wc -c", background=True, stdin=True)
    cat.send_stdin("12345")
    cat.close_stdin()
    assert cat.wait().stdout.strip() == "5"


def test_no_stdin(sbx):
    # Without stdin=True the command's input is empty, as E2B's.
    assert sbx.commands.run("cat; echo end").stdout == "end\n"


def test_disconnect_then_connect(client, sbx):
    h = sbx.commands.run("sleep 0.5; echo done", background=True)
    h.disconnect()
    # The command runs on; connecting again sees its end.
    r = sbx.commands.connect(h.pid).wait()
    assert r.stdout == "done\n"


def test_stream_input(client, sbx):
    cat = sbx.commands.run("cat", background=True, stdin=True)
    try:
        if client.is_async:
            # The async client's is a handle that sends in order, made
            # on a running loop.
            async def feed(commands):
                inp = commands.stream_input(cat.pid)
                await inp.send(b"one ")
                await inp.send(b"two\n")
                await inp.close()

            client.loop.run_until_complete(feed(sbx._obj.commands))
        else:
            sbx.commands.stream_input(cat.pid, [b"one ", b"two\n"])
        sbx.commands.close_stdin(cat.pid)
        assert cat.wait().stdout == "one two\n"
    finally:
        sbx.commands.kill(cat.pid)


def test_user(sbx):
    # E2B runs a command as the user the SDK names. An airlock sandbox
    # has one user, uid 1000 (E2B's "user"), and no root to run as: asking
    # for root is refused by name, never run as someone else.
    assert sbx.commands.run("id -u", user="user").stdout == "1000\n"
    with pytest.raises(SandboxException, match="never as root"):
        sbx.commands.run("id -un", user="root")
    with pytest.raises(SandboxException, match="never as root"):
        sbx.files.read("/workspace/x", user="root")
