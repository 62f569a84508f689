# The code interpreter's bridge: a real IPython kernel (ipykernel's
# in-process kernel) driven over a line protocol. It runs inside the
# sandbox, as the sandbox's user, under the sandbox's ceilings; the host
# trusts nothing it says (internal/interp reads it bounded and checked).
#
# Requests, one JSON object per line on stdin:
#   {"code": "...", "env": {"NAME": "value"}}
# Answers, one JSON object per line on stdout (the descriptor the
# command was started with; see below):
#   {"type": "count", "n": N}                    the execution's number
#   {"type": "stdout" | "stderr", "text": "..."}  output, as it comes
#   {"type": "result", "main": bool, "data": {mime: value}}
#   {"type": "error", "name": ..., "value": ..., "traceback": ...}
#   {"type": "end"}                               always last
# The answers keep the command's stdout; descriptors 1 and 2 become pipes
# the bridge reads itself, so that output written below Python (a
# subprocess, os.write) arrives as output too, and never as an answer.
import json
import os
import sys
import threading

proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
lock = threading.Lock()


def emit(msg):
    with lock:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()


def pump(fd, name):
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            b = f.read(65536)
            if not b:
                return
            emit({"type": name, "text": b.decode("utf-8", "replace")})


for target, name in ((1, "stdout"), (2, "stderr")):
    r, w = os.pipe()
    os.dup2(w, target)
    os.close(w)
    threading.Thread(target=pump, args=(r, name), daemon=True).start()

from ipykernel.inprocess.manager import InProcessKernelManager  # noqa: E402

from traitlets.config import Config  # noqa: E402

# No history file: each kernel's history is its own, in memory (a file
# shared by a context's successive kernels could be left locked by one
# killed mid-write).
config = Config()
config.HistoryManager.hist_file = ":memory:"
km = InProcessKernelManager(config=config)
km.start_kernel()
kernel = km.kernel
send = kernel.session.send


def forward(stream, msg_or_type, content=None, parent=None, *args, **kwargs):
    """Each message the kernel publishes, as it publishes it."""
    out = send(stream, msg_or_type, content, parent, *args, **kwargs)
    m = out if isinstance(out, dict) else {}
    t, c = m.get("msg_type") or m.get("header", {}).get("msg_type"), m.get("content", {})
    if t == "execute_input":
        emit({"type": "count", "n": c.get("execution_count")})
    elif t == "stream":
        emit({"type": c.get("name", "stdout"), "text": c.get("text", "")})
    elif t in ("execute_result", "display_data"):
        emit({"type": "result", "main": t == "execute_result", "data": c.get("data", {})})
    elif t == "error":
        emit({"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
              "traceback": "\n".join(c.get("traceback", []))})
    return out


kernel.session.send = forward
kc = km.client()
kc.start_channels()
emit({"type": "ready"})
for line in sys.stdin:
    try:
        req = json.loads(line)
        env = req.get("env") or {}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update({str(k): str(v) for k, v in env.items()})
        try:
            kc.execute(req.get("code", ""))
            kc.get_shell_msg(timeout=None)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        sys.stdout.flush()
        sys.stderr.flush()
    except KeyboardInterrupt:
        emit({"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ""})
    emit({"type": "end"})
