"""Drives airlock's code interpreter with the official e2b-code-interpreter
Python SDK, as a code-running agent would, through both its clients
(conftest.py).
"""

import threading
import time

import pytest
from e2b import NotFoundException, TimeoutException
from e2b_code_interpreter import Sandbox


def test_print_and_state(sbx):
    ex = sbx.run_code('x = 21\nprint("hi")')
    assert ex.logs.stdout == ["hi\n"]
    assert ex.results == [] and ex.error is None
    ex = sbx.run_code("x * 2")
    assert ex.text == "42"
    assert ex.results[0].is_main_result


def test_callbacks(sbx):
    seen = []
    ex = sbx.run_code(
        'import sys\nprint("out")\nprint("err", file=sys.stderr)',
        on_stdout=lambda m: seen.append(("stdout", m.line, m.error, m.timestamp)),
        on_stderr=lambda m: seen.append(("stderr", m.line, m.error, m.timestamp)),
    )
    assert [s[:3] for s in seen] == [("stdout", "out\n", False), ("stderr", "err\n", True)]
    # E2B's server sends the kernel message's date, as ISO 8601 text.
    assert all(isinstance(s[3], str) and s[3] for s in seen), seen
    assert ex.logs.stderr == ["err\n"]


def test_error_and_display(sbx):
    ex = sbx.run_code('display("shown")\n1/0')
    assert ex.error.name == "ZeroDivisionError"
    assert ex.error.value == "division by zero"
    assert "ZeroDivisionError" in ex.error.traceback
    assert [r.text for r in ex.results] == ["'shown'"]
    assert not ex.results[0].is_main_result


def test_envs(sbx):
    ex = sbx.run_code('import os\nos.environ["ONCE"]', envs={"ONCE": "yes"})
    assert ex.text == "'yes'"
    ex = sbx.run_code('"ONCE" in os.environ')
    assert ex.text == "False"


def test_sandbox_envs(create):
    # The sandbox's variables reach its kernels; a per-call value hides
    # one for that call only, and it is back after.
    s = create(timeout=120, envs={"FROM_CREATE": "yes"})
    try:
        assert s.run_code('import os\nos.environ["FROM_CREATE"]').text == "'yes'"
        assert s.run_code('os.environ["FROM_CREATE"]', envs={"FROM_CREATE": "call"}).text == "'call'"
        assert s.run_code('os.environ["FROM_CREATE"]').text == "'yes'"
        assert s.run_code("echo $FROM_CREATE", language="bash").logs.stdout == ["yes\n"]
    finally:
        s.kill()


def test_context(sbx):
    ctx = sbx.create_code_context(cwd="/tmp")
    assert (ctx.language, ctx.cwd) == ("python", "/tmp")
    ex = sbx.run_code('import os\nos.getcwd(), "x" in dir()', context=ctx)
    assert ex.text == "('/tmp', False)"
    listed = sbx.list_code_contexts()
    assert ctx.id in [c.id for c in listed]
    assert [c.cwd for c in listed if c.id == ctx.id] == ["/tmp"]
    sbx.run_code("y = 1", context=ctx)
    sbx.restart_code_context(ctx)
    assert sbx.run_code("y", context=ctx).error.name == "NameError"
    # The state went; the working directory stayed.
    assert sbx.run_code("import os\nos.getcwd()", context=ctx).text == "'/tmp'"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)


def test_bash(sbx):
    ex = sbx.run_code("n=6; echo $((n*7))", language="bash")
    assert ex.logs.stdout == ["42\n"] and ex.error is None
    ex = sbx.run_code("echo $n; false", language="bash")
    assert ex.logs.stdout == ["6\n"]
    assert ex.error.name == "ExitCode"


def test_timeout(sbx):
    sbx.run_code("kept = 'still here'")
    with pytest.raises(TimeoutException):
        sbx.run_code("while True: pass", timeout=1)
    # The client going away interrupts the execution; the context, and
    # its state, stay. The interrupt may land a moment after.
    deadline = time.monotonic() + 10
    while True:
        ex = sbx.run_code("kept")
        if ex.text == "'still here'" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ex.text == "'still here'", ex


def test_figure(sbx):
    ex = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()")
    assert ex.error is None, ex.error
    assert len(ex.results) == 1
    assert "png" in ex.results[0].formats()
    assert ex.results[0].png.startswith("iVBORw0K")


def test_dataframe(sbx):
    ex = sbx.run_code('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    assert ex.error is None, ex.error
    r = ex.results[0]
    assert r.data == {"a": [1, 2], "b": ["x", "y"]}
    assert "<table" in r.html


def test_killed_during(create):
    # E2B's kill, from another client, under an execution: the execution
    # ends saying so, not as a broken kernel.
    s = create(timeout=120)
    s.run_code("1")
    kill = threading.Timer(2, Sandbox.kill, kwargs={"sandbox_id": s.sandbox_id})
    kill.start()
    try:
        ex = s.run_code("import time\nprint('start', flush=True)\ntime.sleep(30)", timeout=20)
    finally:
        kill.join()
    assert ex.logs.stdout == ["start\n"]
    assert (ex.error.name, ex.error.value) == ("SandboxEnded", "the sandbox ended (deleted) during the execution")
    # E2B's proxy's answer for a sandbox it does not find (502).
    with pytest.raises(TimeoutException, match="was not found"):
        s.run_code("1")


def test_expired_during(create):
    s = create(timeout=3)
    ex = s.run_code("import time\ntime.sleep(30)", timeout=20)
    assert (ex.error.name, ex.error.value) == ("SandboxEnded", "the sandbox ended (max lifetime) during the execution")


def test_killed(create):
    s = create(timeout=120)
    assert s.run_code("1 + 1").text == "2"
    s.kill()
    with pytest.raises(TimeoutException, match="was not found"):
        s.run_code("1")
