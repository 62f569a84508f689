"""What the tests of E2B's Python SDK share: each runs once with the sync
client (Sandbox) and once with the async one (AsyncSandbox).

TestInterpreterPythonSDK (interpreter_py_test.go) runs them against a
daemon, with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
"""

import asyncio
import inspect

import pytest
from e2b_code_interpreter import AsyncSandbox, Sandbox


class Awaited:
    """An AsyncSandbox whose calls are run to the end on a loop of its own,
    so that one test body drives both clients: every call still goes
    through the async client's code."""

    def __init__(self, loop, sbx):
        self._loop = loop
        self._sbx = sbx

    def __getattr__(self, name):
        v = getattr(self._sbx, name)
        if name in ("files", "commands"):
            return Awaited(self._loop, v)
        if not callable(v):
            return v

        def call(*args, **kwargs):
            r = v(*args, **kwargs)
            return self._loop.run_until_complete(r) if inspect.isawaitable(r) else r

        return call


@pytest.fixture(scope="module", params=["sync", "async"])
def create(request):
    """create(**opts) makes a sandbox with the client under test."""
    if request.param == "sync":
        yield Sandbox.create
        return
    loop = asyncio.new_event_loop()
    yield lambda **opts: Awaited(loop, loop.run_until_complete(AsyncSandbox.create(**opts)))
    loop.close()


@pytest.fixture(scope="module")
def sbx(create):
    # The SDK's default template, code-interpreter-v1.
    s = create(timeout=300)
    yield s
    try:
        s.kill()
    except Exception:
        pass
