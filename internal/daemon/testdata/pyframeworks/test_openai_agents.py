"""Runs an agent of the OpenAI Agents SDK for Python (openai-agents, its e2b
extra) whose sandbox is E2B's, through the SDK's own E2B integration
(agents.extensions.sandbox.e2b), against airlock. The model is a scripted
stand-in (no model service is reachable from a test): it asks for one
exec_command call, then answers with what the tool returned. Everything
between, the framework's sandbox session, the E2B SDK and airlock, is real.

TestE2BPythonFrameworks (e2b_frameworks_test.go) runs it against a daemon,
with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
"""

import asyncio
import json
import os

# The framework's warnings carry the error behind them (what airlock
# answered) only with this set before it is imported.
os.environ["OPENAI_AGENTS_DONT_LOG_TOOL_DATA"] = "0"

import pytest  # noqa: E402
from agents import Model, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled  # noqa: E402
from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions  # noqa: E402
from agents.extensions.sandbox.e2b.sandbox import _decode_e2b_snapshot_ref  # noqa: E402
from agents.sandbox import LocalSnapshotSpec, SandboxAgent, SandboxRunConfig  # noqa: E402
from e2b import AsyncSandbox  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

set_tracing_disabled(True)

# The sandbox's user is 1000 and its init is airlock's; pytest runs as
# another user (root in CI), so the answer can only come from the sandbox.
CMD = 'echo "answer $((6*7)) from $(cat /proc/1/comm) as uid $(id -u) in $(pwd)"'


class Scripted(Model):
    """A model that asks for one exec_command call, then answers with what
    the tool returned. It records the tools it was offered and, while the
    run goes on, the sandboxes the E2B API lists."""

    def __init__(self, args):
        self.args = args
        self.tools = []
        self.running = None

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs):
        items = input if isinstance(input, list) else []
        result = next((i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"), None)
        if result is None:
            self.tools = [t.name for t in tools]
            call = ResponseFunctionToolCall(
                type="function_call",
                call_id="c1",
                name="exec_command",
                status="completed",
                arguments=json.dumps(self.args),
            )
            return ModelResponse(output=[call], usage=Usage(), response_id="r1")
        self.running = [s.sandbox_id for s in await AsyncSandbox.list().next_items()]
        out = result["output"]
        text = out if isinstance(out, str) else json.dumps(out)
        msg = ResponseOutputMessage(
            type="message",
            id="m1",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[msg], usage=Usage(), response_id="r2")

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("not streamed")


def run_agent(options, tmp_path, args=None):
    model = Scripted(args or {"cmd": CMD, "login": False, "tty": False})
    agent = SandboxAgent(name="airlock-test", instructions="Run the command.", model=model)
    sandbox = SandboxRunConfig(
        client=E2BSandboxClient(),
        options=options,
        # The workspace's archive at the end goes to the test's directory,
        # not the user's state directory.
        snapshot=LocalSnapshotSpec(base_path=tmp_path),
    )
    res = asyncio.run(Runner.run(agent, "Run the command and report its output.", run_config=RunConfig(sandbox=sandbox)))
    return model, res.final_output


@pytest.mark.parametrize("sandbox_type", ["e2b", "e2b_code_interpreter"])
def test_exec_command(sandbox_type, tmp_path):
    # on_timeout="kill": the client's default, "pause", is
    # test_default_lifecycle's.
    options = E2BSandboxClientOptions(sandbox_type=sandbox_type, timeout=120, on_timeout="kill")
    model, answer = run_agent(options, tmp_path)
    assert "exec_command" in model.tools
    assert "answer 42 from " in answer and "as uid 1000 in /workspace" in answer
    # The sandbox ran while the agent did; at the end the framework kept
    # its workspace (a tar archive it made in the sandbox and read back)
    # and killed it.
    assert len(model.running) == 1
    assert [p.suffix for p in tmp_path.iterdir()] == [".tar"]
    assert asyncio.run(AsyncSandbox.list().next_items()) == []


def test_exec_command_tty(tmp_path):
    # With tty the framework runs the command in a shell on a terminal of
    # the sandbox (pty.create, then the command as its input), and answers
    # what the terminal showed while the command ran.
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=120, on_timeout="kill")
    args = {"cmd": "tty; echo answer $((6*7)) as uid $(id -u)", "tty": True, "yield_time_ms": 2000}
    _, answer = run_agent(options, tmp_path, args)
    assert "/dev/pts/" in answer and "answer 42 as uid 1000\r\n" in answer
    assert asyncio.run(AsyncSandbox.list().next_items()) == []


def test_exposed_ports_refused(tmp_path):
    # exposed_ports asks E2B to let the public reach the sandbox's ports
    # (network allowPublicTraffic): airlock refuses the create (400),
    # naming the option.
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=120, on_timeout="kill", exposed_ports=(8000,))
    with pytest.raises(Exception) as e:
        run_agent(options, tmp_path)
    assert "e2b.exceptions.SandboxException: 400: network.allowPublicTraffic: a sandbox's ports are never public" in messages(e.value)
    assert asyncio.run(AsyncSandbox.list().next_items()) == []


def test_default_lifecycle(tmp_path):
    # The client's defaults ask E2B to pause the sandbox when it times out
    # and to resume it when used (lifecycle on_timeout "pause" and
    # auto_resume: autoPause and autoResume on the wire), which airlock
    # does: the agent runs, and the framework kills the sandbox at the end.
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=120)
    _, answer = run_agent(options, tmp_path)
    assert "answer 42 from " in answer
    assert asyncio.run(AsyncSandbox.list().next_items()) == []


def test_pause_on_exit(tmp_path, caplog):
    # pause_on_exit pauses the sandbox at the end instead of killing it:
    # it is left paused, its owner's, until killed.
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=120, on_timeout="kill", pause_on_exit=True)
    _, answer = run_agent(options, tmp_path)
    assert "answer 42 from " in answer
    assert "Failed to pause" not in caplog.text
    left = asyncio.run(AsyncSandbox.list().next_items())
    assert [i.state.value for i in left] == ["paused"]
    asyncio.run(AsyncSandbox.kill(left[0].sandbox_id))
    assert asyncio.run(AsyncSandbox.list().next_items()) == []


def test_snapshot_persistence(tmp_path, caplog):
    # workspace_persistence="snapshot" keeps the workspace at the end with
    # E2B's snapshot of the sandbox (create_snapshot) instead of a tar
    # archive of it: the framework's local snapshot holds the snapshot's
    # id, which a later run resumes from (a create naming it), and the
    # sandbox is killed. The files are what airlock's snapshot keeps (the
    # workspace and /tmp), which is what the framework persists.
    options = E2BSandboxClientOptions(
        sandbox_type="e2b", timeout=120, on_timeout="kill", workspace_persistence="snapshot"
    )
    _, answer = run_agent(options, tmp_path)
    assert "answer 42 from " in answer
    assert "Failed to clean up sandbox resources after run" not in caplog.text
    [kept] = list(tmp_path.iterdir())
    snapshot_id = _decode_e2b_snapshot_ref(kept.read_bytes())
    assert snapshot_id and snapshot_id.startswith("snap_")
    assert asyncio.run(AsyncSandbox.list().next_items()) == []

    async def resume():
        sbx = await AsyncSandbox.create(snapshot_id, timeout=60)
        try:
            return (await sbx.commands.run("pwd; ls -d /workspace")).stdout
        finally:
            await sbx.kill()

    assert asyncio.run(resume()).endswith("/workspace\n")
    assert asyncio.run(AsyncSandbox.delete_snapshot(snapshot_id)) is True


def messages(e):
    """The messages of the exception e and of its causes, one a line."""
    out = []
    while e is not None:
        out.append(f"{type(e).__module__}.{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return "\n".join(out)
