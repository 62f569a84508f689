"""Terminals through E2B's Python SDK, both clients: create, typed input,
resize, the output as one stream, the shell's exit code, kill, connect.
"""

import re
import time

import pytest

from e2b import CommandExitException, InvalidArgumentException, PtySize


class Screen:
    """A terminal's output, as each client gives it: the async client
    calls on_data as it comes, the sync one yields it from its handle."""

    def __init__(self, client):
        self.client = client
        self.data = b""
        self._it = None

    def on_data(self, b):
        self.data += b

    def create(self, sbx, **opts):
        if self.client.is_async:
            return sbx.pty.create(PtySize(rows=24, cols=80), on_data=self.on_data, **opts)
        h = sbx.pty.create(PtySize(rows=24, cols=80), **opts)
        self._it = iter(h)
        return h

    def connect(self, sbx, pid):
        if self.client.is_async:
            return sbx.pty.connect(pid, on_data=self.on_data)
        h = sbx.pty.connect(pid)
        self._it = iter(h)
        return h

    def wait_for(self, pattern, seconds=5):
        """Reads until the output matches pattern; whether it did."""
        if self.client.is_async:
            return self.client.until(lambda: re.search(pattern, self.data), seconds)
        deadline = time.monotonic() + seconds
        while not re.search(pattern, self.data) and time.monotonic() < deadline:
            try:
                _, _, pty = next(self._it)
            except StopIteration:
                break
            if pty is not None:
                self.data += pty
        return re.search(pattern, self.data) is not None

    def wait(self, h):
        """The handle's end, its output read to it."""
        if self.client.is_async:
            return h.wait()
        return h.wait(on_pty=self.on_data)


def test_pty(client, sbx):
    s = Screen(client)
    term = s.create(sbx, timeout=0)
    assert term.pid > 0
    sbx.pty.send_stdin(term.pid, b'stty size; tty; echo "pty-$((6*7))"\n')
    assert s.wait_for(rb"pty-42")
    assert re.search(rb"24 80", s.data)
    assert re.search(rb"/dev/pts/\d", s.data)
    sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(term.pid, b"stty size; exit 5\n")
    with pytest.raises(CommandExitException) as e:
        s.wait(term)
    assert e.value.exit_code == 5
    assert re.search(rb"30 100", s.data)
    # Its output is the terminal's one stream, not stdout.
    assert e.value.stdout == ""


def test_pty_kill_and_connect(client, sbx):
    s = Screen(client)
    term = s.create(sbx, timeout=0)
    again = Screen(client)
    h = again.connect(sbx, term.pid)
    sbx.pty.send_stdin(term.pid, b'echo "seen-$((2*3))"\n')
    assert again.wait_for(rb"seen-6")
    assert sbx.pty.kill(term.pid) is True
    with pytest.raises(CommandExitException) as e:
        again.wait(h)
    assert e.value.exit_code == -1
    assert client.until(lambda: term.pid not in [p.pid for p in sbx.commands.list()])
    assert sbx.pty.kill(term.pid) is False


def test_pty_zero_cols(client, sbx):
    with pytest.raises(InvalidArgumentException, match="0 cols"):
        if client.is_async:
            sbx.pty.create(PtySize(rows=24, cols=0), on_data=lambda b: None)
        else:
            sbx.pty.create(PtySize(rows=24, cols=0))
