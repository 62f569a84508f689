"""Runs a LangChain Deep Agent (deepagents) whose backend is langchain-e2b's
E2B sandbox, against airlock, with only the chat model scripted (no model
service is reachable from a test): it writes a file with the agent's
write_file tool, runs a command that reads it with the execute tool, and
answers with what the command printed. The tools, the backend, the E2B SDK
and airlock are real.

TestE2BPythonFrameworks (e2b_frameworks_test.go) runs it against a daemon,
with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
"""

import asyncio
import uuid

import e2b
import pytest
from deepagents import create_deep_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_e2b import AsyncE2BSandbox, E2BSandbox


class Scripted(BaseChatModel):
    """A chat model that calls the tools it was given to call, in order,
    one a turn, and then answers with what the last one returned."""

    calls: list
    asked: int = 0
    tools: list = []

    @property
    def _llm_type(self):
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        self.tools = [t["name"] if isinstance(t, dict) else t.name for t in tools]
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.asked += 1
        if self.asked <= len(self.calls):
            name, args = self.calls[self.asked - 1]
            msg = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{self.asked}"}])
        else:
            last = [m for m in messages if isinstance(m, ToolMessage)][-1]
            msg = AIMessage(content=last.text)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def script():
    # A file of a new name in the sandbox's workspace; the command reads it
    # back and says who ran it: the sandbox's user is 1000 and its init is
    # airlock's, so the answer can only come from the sandbox.
    path = f"/workspace/note-{uuid.uuid4().hex[:8]}.txt"
    return path, Scripted(
        calls=[
            ("write_file", {"file_path": path, "content": "written by the agent\n"}),
            ("execute", {"command": f'cat {path}; echo "answer $((6*7)) from $(cat /proc/1/comm) as uid $(id -u) in $(pwd)"'}),
        ]
    )


def check(model, path, answer):
    assert {"write_file", "execute"} <= set(model.tools)
    assert model.asked == 3
    # The execute tool's output, and the exit code it adds.
    assert answer.startswith("written by the agent\nanswer 42 from ")
    assert "as uid 1000 in /workspace\n" in answer
    assert answer.endswith("[Command succeeded with exit code 0]")


def test_deep_agent():
    # e2b's default template is base, a tool of its own here.
    sbx = e2b.Sandbox.create(timeout=120)
    try:
        path, model = script()
        # The backend runs commands in /workspace: its default, /home/user,
        # is not in a sandbox on the host's root.
        agent = create_deep_agent(model=model, backend=E2BSandbox(sandbox=sbx, workdir="/workspace"))
        out = agent.invoke({"messages": [{"role": "user", "content": "Write the note, then read it back."}]})
        check(model, path, out["messages"][-1].text)
        # The file is in the sandbox, read through the files API.
        assert sbx.files.read(path) == "written by the agent\n"
    finally:
        sbx.kill()
    with pytest.raises(e2b.SandboxNotFoundException):
        e2b.Sandbox.connect(sbx.sandbox_id)


def test_async_deep_agent():
    async def run():
        sbx = await e2b.AsyncSandbox.create(timeout=120)
        try:
            path, model = script()
            agent = create_deep_agent(model=model, backend=AsyncE2BSandbox(sandbox=sbx, workdir="/workspace"))
            out = await agent.ainvoke({"messages": [{"role": "user", "content": "Write the note, then read it back."}]})
            check(model, path, out["messages"][-1].text)
        finally:
            await sbx.kill()
        assert await e2b.AsyncSandbox.list().next_items() == []

    asyncio.run(run())
