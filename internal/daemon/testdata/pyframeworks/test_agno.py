"""Runs an Agno agent with Agno's E2B toolkit (agno.tools.e2b.E2BTools, over
e2b-code-interpreter) against airlock, with only the model scripted (no
model service is reachable from a test): it runs Python in the sandbox's
interpreter, then a command that reads what the Python wrote, then shuts
the sandbox down with the toolkit's own tool, and answers with what the
tools returned. The toolkit, the E2B SDK and airlock are real.

TestE2BPythonFrameworks (e2b_frameworks_test.go) runs it against a daemon,
with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
"""

import json
import uuid
from dataclasses import dataclass, field

import pytest
from agno.agent import Agent
from agno.models.base import Model
from agno.models.response import ModelResponse
from agno.tools.e2b import E2BTools
from e2b import SandboxNotFoundException
from e2b_code_interpreter import Sandbox


@dataclass
class Scripted(Model):
    """A model that calls the tools it was given to call, in order, one a
    turn, and then answers with what they returned, a JSON list."""

    id: str = "scripted"
    calls: list = field(default_factory=list)
    asked: int = 0
    tools: list = field(default_factory=list)

    def invoke(self, messages=None, tools=None, **kwargs):
        self.asked += 1
        if self.asked == 1:
            self.tools = [t["function"]["name"] for t in tools or []]
        if self.asked <= len(self.calls):
            name, args = self.calls[self.asked - 1]
            call = {"id": f"c{self.asked}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            return ModelResponse(role="assistant", tool_calls=[call])
        results = [str(m.content) for m in messages if m.role == "tool"]
        return ModelResponse(role="assistant", content=json.dumps(results))

    async def ainvoke(self, *args, **kwargs):
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args, **kwargs):
        raise NotImplementedError("not streamed")

    def ainvoke_stream(self, *args, **kwargs):
        raise NotImplementedError("not streamed")

    def _parse_provider_response(self, response, **kwargs):
        return response

    def _parse_provider_response_delta(self, response):
        return response


def test_e2b_tools():
    # The toolkit creates its sandbox as it is made, of the code
    # interpreter's default template, code-interpreter-v1.
    tools = E2BTools(timeout=120)
    sandbox_id = tools.sandbox.sandbox_id
    # A file of a new name in the sandbox's /tmp: Python writes it, the
    # command reads it. The sandbox's user is 1000 and its init is
    # airlock's; pytest runs as another user (root in CI).
    path = f"/tmp/airlock-{uuid.uuid4().hex}"
    model = Scripted(
        calls=[
            (
                "run_python_code",
                {"code": f"import os\nopen({path!r}, 'w').write(f'uid={{os.getuid()}}')\nprint('wrote', os.getuid())\n6*7"},
            ),
            ("run_command", {"command": f"cat {path}; echo; cat /proc/1/comm"}),
            ("shutdown_sandbox", {}),
        ]
    )
    try:
        agent = Agent(model=model, tools=[tools], telemetry=False)
        answer = agent.run("Who runs your code?").content
    finally:
        # Killed already by the agent's last call, unless it failed.
        try:
            Sandbox.kill(sandbox_id)
        except Exception:
            pass
    assert {"run_python_code", "run_command", "shutdown_sandbox"} <= set(model.tools)
    assert model.asked == 4
    python, command, shutdown = (json.loads(r) for r in json.loads(answer))
    # The interpreter's stdout and the last expression's value.
    assert "wrote 1000" in python[0] and python[1:] == ["Result 1: 42"]
    assert command == ["STDOUT:\nuid=1000\nairlock-init\n"]
    assert shutdown["status"] == "success"
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox_id)
