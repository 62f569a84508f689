"""The compatibility matrix's probe for E2B's Python SDK (the e2b package
of the Python running it; e2b_code_interpreter too, when
E2B_INTERPRETER=1): one probe per feature, the same as e2b_matrix.mjs's,
each printed as a JSON line {"k": feature, "v": {"result": ..., "detail":
...}} where result is "works", "refused" (airlock said why it does not),
"absent" (this SDK has no such call), "untested" or "fails" (anything
else: a difference to fix). TestE2BMatrix runs it.
"""

import json
import os
import re
import time
import urllib.request

from e2b import CommandExitException, PtySize, Sandbox
from e2b.sandbox.sandbox_api import SandboxQuery


def out(k, v):
    print(json.dumps({"k": k, "v": v}), flush=True)


class Check(Exception):
    pass


class Untested(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Check(what)


REFUSAL = re.compile(r"airlock does not|not supported by airlock|is not served by airlock|is not supported")


def probe(name, fn):
    try:
        out(name, {"result": "works", "detail": fn() or ""})
    except Untested as e:
        out(name, {"result": "untested", "detail": str(e)})
    except AttributeError as e:
        out(name, {"result": "absent", "detail": str(e)})
    except Exception as e:  # noqa: BLE001 - every failure is reported
        msg = str(e)
        if not isinstance(e, Check) and REFUSAL.search(msg):
            out(name, {"result": "refused", "detail": re.sub(r"^\d+: ", "", msg)})
        else:
            out(name, {"result": "fails", "detail": f"{type(e).__name__}: {msg}"})


sbx = Sandbox.create(template="sh", timeout=120, metadata={"probe": "matrix"}, envs={"PROBE": "yes"})


def lifecycle():
    check(sbx.is_running(), "is_running of a new sandbox")
    info = sbx.get_info()
    check(info.sandbox_id == sbx.sandbox_id and info.metadata.get("probe") == "matrix", "get_info")
    sbx.set_timeout(90)
    listed = Sandbox.list(query=SandboxQuery(metadata={"probe": "matrix"})).next_items()
    check(any(i.sandbox_id == sbx.sandbox_id for i in listed), "list by metadata")
    again = Sandbox.connect(sbx.sandbox_id)
    check(again.commands.run("echo $PROBE").stdout == "yes\n", "connect and the create envs")
    other = Sandbox.create(template="sh")
    check(other.kill(), "kill")
    check(not other.is_running(), "is_running after kill")


def commands():
    r = sbx.commands.run("echo out; echo err >&2", cwd="/tmp", envs={"A": "b"})
    check((r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0), "run")
    seen = []
    # The sync client takes a background command's callbacks in wait().
    h = sbx.commands.run("echo 1; sleep 0.2; echo 2", background=True)
    check(h.wait(on_stdout=seen.append).exit_code == 0 and "".join(seen) == "1\n2\n", "a background command and its callback")
    try:
        sbx.commands.run("exit 3")
        code = 0
    except CommandExitException as e:
        code = e.exit_code
    check(code == 3, "a non-zero exit")
    k = sbx.commands.run("sleep 30", background=True)
    check(sbx.commands.kill(k.pid), "kill a command")


def files():
    sbx.files.write("/workspace/m/a.txt", "A")
    check(sbx.files.read("/workspace/m/a.txt") == "A", "write and read")
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    sbx.files.write_files([WriteEntry(path="/workspace/m/b.txt", data="B"), WriteEntry(path="/tmp/c.txt", data="C")])
    check(sorted(e.name for e in sbx.files.list("/workspace/m")) == ["a.txt", "b.txt"], "list")
    check(sbx.files.exists("/tmp/c.txt"), "exists")
    sbx.files.make_dir("/workspace/m/d")
    sbx.files.rename("/workspace/m/b.txt", "/workspace/m/d/b.txt")
    sbx.files.remove("/workspace/m/a.txt")
    check(not sbx.files.exists("/workspace/m/a.txt"), "remove")
    with urllib.request.urlopen(sbx.download_url("/workspace/m/d/b.txt")) as resp:
        check(resp.read() == b"B", "a signed download URL")


def watch():
    sbx.files.make_dir("/workspace/w")
    h = sbx.files.watch_dir("/workspace/w", recursive=True)
    sbx.commands.run("echo x > /workspace/w/f.txt")
    seen = []
    for _ in range(100):
        seen += [f"{e.type.value}:{e.name}" for e in h.get_new_events()]
        if any(s.endswith(":f.txt") for s in seen):
            break
        time.sleep(0.05)
    h.stop()
    check("create:f.txt" in seen, f"watch_dir saw {' '.join(seen)}")


def pty():
    data = []
    p = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(p.pid, b"stty size; exit 4\n")
    try:
        r = p.wait(on_pty=lambda d: data.append(bytes(d).decode(errors="replace")))
        code = r.exit_code
    except CommandExitException as e:
        code = e.exit_code
    text = "".join(data)
    check("24 80" in text and code == 4, f"pty said {text[-80:]!r}")


def ports():
    sbx.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp >/dev/null 2>&1", background=True)
    sbx.commands.run(
        "for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000))\" 2>/dev/null && exit 0; sleep 0.05; done; exit 1"
    )
    req = urllib.request.Request(
        os.environ["E2B_API_URL"] + "/",
        headers={"Host": sbx.get_host(8000), "e2b-traffic-access-token": sbx.traffic_access_token},
    )
    with urllib.request.urlopen(req) as resp:
        check(resp.status == 200 and b"Directory listing" in resp.read(), "get_host(8000)")


def interpreter():
    if os.environ.get("E2B_INTERPRETER") != "1":
        raise Untested("not with this SDK")
    from e2b_code_interpreter import Sandbox as CI

    ci = CI.create()
    try:
        ci.run_code("x = 6")
        check(ci.run_code("x * 7").text == "42", "run_code")
    finally:
        ci.kill()


def pause():
    sbx.commands.run('sh -c "sleep 600" >/dev/null 2>&1 & echo $! > /tmp/paused')
    (sbx.pause if hasattr(sbx, "pause") else sbx.beta_pause)()
    check(sbx.get_info().state.value == "paused", "get_info of a paused sandbox")
    again = Sandbox.connect(sbx.sandbox_id)
    r = again.commands.run('kill -0 "$(cat /tmp/paused)" && echo alive')
    check(r.stdout == "alive\n", "connect resumes it, its process alive")


def snapshots():
    sbx.files.write("/workspace/snap.txt", "in the snapshot")
    snap = sbx.create_snapshot()
    made = Sandbox.create(template=snap.snapshot_id, timeout=60)
    try:
        check(made.files.read("/workspace/snap.txt") == "in the snapshot", "a sandbox from the snapshot has its files")
    finally:
        made.kill()
    check(Sandbox.delete_snapshot(snap.snapshot_id), "delete_snapshot")


def volumes():
    import e2b

    volume = getattr(e2b, "Volume")
    vol = volume.create(f"matrix-{time.time_ns()}")
    try:
        a = Sandbox.create(template="sh", timeout=60, volume_mounts={"/mnt/vol": vol})
        a.commands.run("echo kept > /mnt/vol/f")
        a.kill()
        b = Sandbox.create(template="sh", timeout=60, volume_mounts={"/mnt/vol": vol.name})
        try:
            check(b.files.read("/mnt/vol/f") == "kept\n", "a second sandbox reads what the first wrote")
        finally:
            b.kill()
    finally:
        check(volume.destroy(vol.volume_id), "Volume.destroy")


def network():
    closed = Sandbox.create(template="sh", allow_internet_access=False)
    try:
        check(closed.commands.run("echo in").stdout == "in\n", "a sandbox without internet runs")
    finally:
        closed.kill()


def metrics():
    m = sbx.get_metrics()
    check(m and m[0].mem_total > 0 and m[0].cpu_count >= 1, "get_metrics")


try:
    for name, fn in [
        ("lifecycle", lifecycle),
        ("commands", commands),
        ("files", files),
        ("watch", watch),
        ("pty", pty),
        ("ports", ports),
        ("interpreter", interpreter),
        ("pause", pause),
        ("snapshots", snapshots),
        ("volumes", volumes),
        ("network", network),
        ("metrics", metrics),
    ]:
        probe(name, fn)
finally:
    try:
        sbx.kill()
    except Exception:  # noqa: BLE001
        pass
