"""Runs a smolagents CodeAgent whose code goes through its E2B executor
(e2b-code-interpreter) to airlock, with only the model scripted: each step
the agent takes is code run in the sandbox.
"""

import os
import uuid

from smolagents import CodeAgent, Model
from smolagents.models import ChatMessage, MessageRole
from smolagents.monitoring import TokenUsage


class Scripted(Model):
    """A model that answers with the replies it was given, in order."""

    def __init__(self, replies):
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.asked = 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        reply = self.replies[self.asked]
        self.asked += 1
        return ChatMessage(role=MessageRole.ASSISTANT, content=reply, token_usage=TokenUsage(input_tokens=0, output_tokens=0))


def test_code_agent():
    # A file only the sandbox has: its name is new, and the host's /tmp
    # never sees it.
    path = f"/tmp/airlock-{uuid.uuid4().hex}"
    model = Scripted(
        [
            # The sandbox's user is 1000; pytest runs as another (root in
            # CI), so the answer can only come from the sandbox.
            "Thought: find out who runs my code.\n"
            "<code>\n"
            "import os\n"
            "uid = os.getuid()\n"
            f"with open({path!r}, 'w') as f:\n"
            "    f.write(f'uid={uid}')\n"
            "print('wrote', uid)\n"
            "</code>",
            "Thought: read it back in a later step, and answer.\n"
            "<code>\n"
            f"with open({path!r}) as f:\n"
            "    final_answer(f.read() + f' again={uid}')\n"
            "</code>",
        ]
    )
    # No additional_authorized_imports: the executor pip-installs those in
    # the sandbox, which has no internet.
    agent = CodeAgent(tools=[], model=model, executor_type="e2b", max_steps=3)
    try:
        answer = agent.run("Which user runs your code?")
        steps = [s for s in agent.memory.steps if getattr(s, "code_action", None)]
    finally:
        agent.cleanup()
    assert answer == "uid=1000 again=1000"
    assert model.asked == 2
    assert "wrote 1000" in steps[0].observations
    assert os.getuid() != 1000 and not os.path.exists(path)
