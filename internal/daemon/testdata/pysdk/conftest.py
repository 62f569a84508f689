"""What the tests of E2B's Python SDK (e2b) share: each module runs once
with the sync client (Sandbox) and once with the async one (AsyncSandbox).

TestE2BPythonSDK (e2b_py_test.go) runs them against a daemon, with
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set; the template is the tool
sh of its config.
"""

import asyncio
import inspect
import os
import time

import pytest
from e2b import AsyncSandbox, Sandbox

TEMPLATE = "sh"

# GVISOR says the config's tools run on the gvisor backend
# (TestE2BPythonSDKGVisor): what differs there is expected as it is.
GVISOR = os.environ.get("AIRLOCK_TEST_E2B_ISOLATION") == "gvisor"


class Awaited:
    """An object of the async client whose calls are run to the end on a
    loop of its own, so that one test body drives both clients: every call
    still goes through the async client's code. What a call returns that is
    the async client's own (a handle, a paginator) is wrapped the same way.
    """

    def __init__(self, loop, obj):
        self._loop = loop
        self._obj = obj

    def _wrap(self, v):
        if type(v).__module__.startswith("e2b.sandbox_async"):
            return Awaited(self._loop, v)
        return v

    def __getattr__(self, name):
        v = getattr(self._obj, name)
        if name in ("files", "commands", "pty"):
            return Awaited(self._loop, v)
        if not callable(v):
            return v

        def call(*args, **kwargs):
            r = v(*args, **kwargs)
            if inspect.isawaitable(r):
                r = self._loop.run_until_complete(r)
            return self._wrap(r)

        return call


class Client:
    """The client under test: E2B's Sandbox, or its AsyncSandbox through
    Awaited. Where the two clients' calls differ (callbacks, watches), a
    test asks is_async."""

    def __init__(self, kind):
        self.is_async = kind == "async"
        self.cls = AsyncSandbox if self.is_async else Sandbox
        self.loop = asyncio.new_event_loop() if self.is_async else None

    def _run(self, r):
        if self.is_async:
            r = self.loop.run_until_complete(r)
            if type(r).__module__.startswith("e2b.sandbox_async"):
                return Awaited(self.loop, r)
        return r

    def create(self, template=TEMPLATE, **opts):
        return self._run(self.cls.create(template, **opts))

    def connect(self, sandbox_id, **opts):
        return self._run(self.cls.connect(sandbox_id, **opts))

    def list(self, **opts):
        p = self.cls.list(**opts)
        return Awaited(self.loop, p) if self.is_async else p

    def kill(self, sandbox_id, **opts):
        return self._run(self.cls.kill(sandbox_id, **opts))

    def sleep(self, seconds):
        """Waits, letting the async client's background tasks (callbacks,
        watches) run meanwhile."""
        if self.is_async:
            self.loop.run_until_complete(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    def until(self, cond, seconds=5):
        """Waits until cond() holds, at most seconds; returns cond()."""
        deadline = time.monotonic() + seconds
        while not cond() and time.monotonic() < deadline:
            self.sleep(0.02)
        return cond()

    def close(self):
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(scope="module", params=["sync", "async"])
def client(request):
    c = Client(request.param)
    yield c
    c.close()


@pytest.fixture(scope="module")
def sbx(client):
    """One sandbox of the tool sh per module and client."""
    s = client.create(timeout=120)
    yield s
    try:
        s.kill()
    except Exception:
        pass
