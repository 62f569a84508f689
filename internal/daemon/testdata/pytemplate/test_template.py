"""E2B's Python Template SDK against airlock: TestE2BTemplateBuildPython
(e2b_template_test.go) runs these with E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY set, a build context in AIRLOCK_TEST_CONTEXT and the mirror
builds may reach in AIRLOCK_TEST_MIRROR."""

import asyncio
import os

import pytest
from e2b import AsyncSandbox, AsyncTemplate, BuildException, Sandbox, Template

CONTEXT = os.environ["AIRLOCK_TEST_CONTEXT"]
MIRROR = os.environ["AIRLOCK_TEST_MIRROR"]


def template(cls):
    return (
        cls(file_context_path=CONTEXT)
        .from_image("busybox-base")
        .copy("hello.sh", "/opt/app/hello.sh", mode=0o755)
        .copy("data", "/opt/app/data")
        .set_envs({"GREETING": "hello"})
        .run_cmd(f"wget -q -O /opt/app/pkg http://{MIRROR}/py")
        .set_workdir("/opt/app")
    )


def test_build_sync():
    logs = []
    info = Template.build(template(Template), "py-tool", on_build_logs=lambda l: logs.append(l.message))
    assert info.name == "py-tool"
    assert Template.exists("py-tool")
    sbx = Sandbox.create("py-tool", timeout=60)
    try:
        assert sbx.commands.run("/opt/app/hello.sh").stdout.startswith("hello from /opt/app as ")
        assert sbx.commands.run("cat /opt/app/pkg /opt/app/data/sub/b.txt").stdout == "from the mirror: /py\nb\n"
    finally:
        sbx.kill()
    # Built again: every step from the cache.
    logs.clear()
    Template.build(template(Template), "py-tool", on_build_logs=lambda l: logs.append(l.message))
    assert sum(1 for m in logs if m.strip() == "cached") == 4, logs


def test_build_async():
    async def run():
        info = await AsyncTemplate.build(template(AsyncTemplate), "py-tool-async:v1")
        assert info.name == "py-tool-async:v1"
        sbx = await AsyncSandbox.create("py-tool-async:v1", timeout=60)
        try:
            r = await sbx.commands.run("cat /opt/app/data/a.txt")
            assert r.stdout == "a\n"
        finally:
            await sbx.kill()

    asyncio.run(run())


def test_failed_step():
    bad = Template(file_context_path=CONTEXT).from_image("busybox-base").run_cmd("exit 7")
    with pytest.raises(BuildException) as e:
        Template.build(bad, "py-bad")
    assert "exit code 7" in str(e.value)
