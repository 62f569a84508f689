# The code interpreter's bridge: one context's kernel, driven over a line
# protocol. For Python it is IPython's shell, the engine of IPython's
# Jupyter kernel (state, magics, "!" commands, rich display), speaking
# this protocol instead of Jupyter's messages; for bash, a bash that keeps
# its state between executions. It
# runs inside the sandbox, as the sandbox's user, under the sandbox's
# ceilings; the host trusts nothing it says (internal/interp reads it
# bounded and checked).
#
# Arguments: the language ("python" or "bash") and the working directory.
# Requests, one JSON object per line on stdin:
#   {"code": "...", "env": {"NAME": "value"}}   an execution, env for it
#   {"setenv": {"NAME": "value"}}               env from now on; "end"
# Answers, one JSON object per line on stdout (the descriptor the
# command was started with; see below):
#   {"type": "ready"}                             once, when it can serve
#   {"type": "count", "n": N}                    the execution's number
#   {"type": "stdout" | "stderr", "text": "..."}  output, as it comes
#   {"type": "result", "main": bool, "data": {mime: value}}
#   {"type": "error", "name": ..., "value": ..., "traceback": ...}
#   {"type": "end"}                               always last
# An error before "ready" says why the kernel could not start (a working
# directory that is not one).
# The answers keep the command's stdout; descriptors 1 and 2 become pipes
# the bridge reads itself, so that output written below Python (a
# subprocess, os.write) arrives as output too, and never as an answer.
import fcntl
import json
import os
import select
import signal
import struct
import sys
import termios
import threading
import time

proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
lock = threading.Lock()
# The requests keep the command's stdin on a descriptor of the bridge's
# own; descriptor 0 becomes /dev/null, so that neither the code nor a
# process it starts can read the protocol (input() sees end of file).
requests_in = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="replace")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
sys.stdin = open(os.devnull, "r")


def emit(msg):
    with lock:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()


class Pump:
    """Reads one of the descriptors the code writes to, and says it."""

    def __init__(self, fd, name):
        self.fd, self.name, self.lock = fd, name, threading.Lock()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            select.select([self.fd], [], [])
            with self.lock:
                b = os.read(self.fd, 65536)
                if not b:
                    return
                emit({"type": self.name, "text": b.decode("utf-8", "replace")})

    def pending(self):
        with self.lock:
            return struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, b"\0\0\0\0"))[0]


pumps = []
for target, name in ((1, "stdout"), (2, "stderr")):
    r, w = os.pipe()
    os.dup2(w, target)
    os.close(w)
    pumps.append(Pump(r, name))


def drain():
    """Waits until what the execution wrote to descriptors 1 and 2 has
    been said, so that its output comes before its end (output of a
    process it left running comes when it comes)."""
    deadline = time.monotonic() + 2
    while any(p.pending() for p in pumps) and time.monotonic() < deadline:
        time.sleep(0.001)


language, cwd = (sys.argv[1:] + ["python", ""])[:2]
try:
    if cwd:
        os.chdir(cwd)
except OSError as e:
    emit({"type": "error", "name": "WorkingDirectory", "value": "%s: %s" % (cwd, e.strerror), "traceback": ""})
    sys.exit(1)


def requests(setenv):
    """The executions asked for; a setenv request is served here. An
    interrupt that comes while none runs (its execution ended as it was
    sent) is let pass."""
    while True:
        try:
            line = requests_in.readline()
        except KeyboardInterrupt:
            continue
        if not line:
            return
        req = json.loads(line)
        if "setenv" in req:
            setenv({str(k): str(v) for k, v in (req.get("setenv") or {}).items()})
            emit({"type": "end"})
            continue
        yield req.get("code", ""), {str(k): str(v) for k, v in (req.get("env") or {}).items()}


def add_formatters(shell):
    """E2B's result forms beyond Jupyter's: a DataFrame's columns as
    "e2b/data", a matplotlib figure's chart as "e2b/chart" (where E2B's
    own extraction, the e2b_charts package, is installed)."""
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            # Only a DataFrame, and only once pandas is imported: a
            # plain value never pays for pandas' import.
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            cols = obj.to_dict(orient="list")
            for k, v in cols.items():
                cols[k] = [x.isoformat() if isinstance(x, pandas.Timestamp) else x for x in v]
            return json.loads(pandas.io.json.dumps(cols, default_handler=str))

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict, str)

        def __call__(self, obj):
            if sys.modules.get("matplotlib") is None:
                return super().__call__(obj)
            from matplotlib.figure import Figure
            if not isinstance(obj, Figure):
                return super().__call__(obj)
            try:
                from e2b_charts import chart_figure_to_dict
                return chart_figure_to_dict(obj)
            except Exception:
                return None

    f = shell.display_formatter
    f.formatters["e2b/data"] = DataFormatter(parent=f)
    f.formatters["e2b/chart"] = ChartFormatter(parent=f)


class Output:
    """sys.stdout or sys.stderr of the code: what it writes is said as
    output line by line, as it comes (and whatever is left when the code
    flushes, displays a result, or ends)."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, name, fd):
        self.name, self.fd, self.buf, self.lock = name, fd, [], threading.Lock()

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        if not text:
            return 0
        with self.lock:
            self.buf.append(text)
            if "\n" in text:
                self._flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def _flush(self):
        if self.buf:
            text, self.buf = "".join(self.buf), []
            emit({"type": self.name, "text": text})

    def flush(self):
        with self.lock:
            self._flush()

    def fileno(self):
        return self.fd

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    @property
    def closed(self):
        return False


def python_main():
    # Debian's matplotlib reads its defaults from /etc/matplotlibrc, which
    # a sandbox of the host's image does not see (it sees /usr): the
    # same file under /usr then, unless something else names one.
    debian_rc = "/usr/share/matplotlib/mpl-data/matplotlibrc"
    if "MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc") and os.path.exists(debian_rc):
        os.environ["MATPLOTLIBRC"] = debian_rc

    # Figures come back as results (PNG), as in a notebook, where the
    # inline backend is installed and nothing else is asked for.
    import importlib.util
    if "MPLBACKEND" not in os.environ and importlib.util.find_spec("matplotlib_inline") is not None:
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"

    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    out, err = Output("stdout", 1), Output("stderr", 2)
    sys.stdout, sys.stderr = out, err

    def flush():
        """What the code wrote, said before what comes next (a result,
        an error, the end): Python's own, then that of the processes it
        ran."""
        out.flush()
        err.flush()
        drain()

    class Hook(DisplayHook):
        """The last expression's value: the execution's main result."""

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            flush()
            emit({"type": "result", "main": True, "data": format_dict})

        def finish_displayhook(self):
            pass

    class Publisher(DisplayPublisher):
        """display(): a further result."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            flush()
            emit({"type": "result", "main": False, "data": data})

        def clear_output(self, wait=False):
            pass

    class Shell(InteractiveShell):
        """IPython's shell, the engine of its Jupyter kernel, speaking
        this bridge's protocol instead of Jupyter's messages."""

        def _showtraceback(self, etype, evalue, stb):
            flush()
            emit({"type": "error", "name": etype.__name__ if etype else "", "value": str(evalue),
                  "traceback": "\n".join(stb)})

    # As E2B's kernels: plain tracebacks, sequences shown whole, no
    # history file (each kernel's history is its own, in memory).
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "NoColor"
    config.InteractiveShell.xmode = "Context"
    config.PlainTextFormatter.max_seq_length = 0
    shell = Shell.instance(config=config, displayhook_class=Hook, display_pub_class=Publisher)
    # IPython's own displayhook class keeps sys.displayhook; its shell
    # sets it around each execution.
    add_formatters(shell)
    emit({"type": "ready"})
    for code, env in requests(os.environ.update):
        try:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                emit({"type": "count", "n": shell.execution_count})
                shell.run_cell(code, store_history=True)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            flush()
        except KeyboardInterrupt:
            flush()
            emit({"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ""})
        emit({"type": "end"})


def bash_main():
    import shlex
    import subprocess
    import tempfile

    # An interrupt reaches the command's whole process group: the shell,
    # what it runs, and this bridge, which lets it pass (a handler, not
    # SIG_IGN, which the shell would inherit and could not trap).
    signal.signal(signal.SIGINT, lambda *_: None)
    cells = tempfile.mkdtemp(prefix=".airlock-bash-")
    status_r, status_w = os.pipe()

    def start():
        # Interactive-free: no profile, no rc, no job control. Between
        # executions an interrupt is caught, and does not end the shell.
        sh = subprocess.Popen(["/bin/bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                              stdout=1, stderr=2, pass_fds=(status_w,))
        sh.stdin.write(b"trap : INT\n")
        sh.stdin.flush()
        return sh

    sh = start()
    count = 0

    def run(script):
        """Runs script in the shell; its status, or None if the shell
        exited."""
        try:
            sh.stdin.write(script.encode())
            sh.stdin.flush()
        except BrokenPipeError:
            pass
        while True:
            ready, _, _ = select.select([status_r], [], [], 0.1)
            if ready:
                return int(os.read(status_r, 64).split(b"\n")[0] or b"0")
            if sh.poll() is not None:
                return None

    def setenv(env):
        run("".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in env.items()) + "printf '0\\n' >&%d\n" % status_w)

    emit({"type": "ready"})
    for code, env in requests(setenv):
        count += 1
        emit({"type": "count", "n": count})
        cell = os.path.join(cells, "cell")
        with open(cell, "w") as f:
            f.write(code + "\n")
        # The execution's env is set for it and put back after, as it was.
        before, after = [], []
        for i, (k, v) in enumerate(env.items()):
            before.append('if [ -n "${%s+x}" ]; then __airlock_had%d=1 __airlock_was%d=$%s; else __airlock_had%d=; fi; export %s=%s'
                          % (k, i, i, k, i, k, shlex.quote(v)))
            after.append('if [ -n "$__airlock_had%d" ]; then %s=$__airlock_was%d; else unset %s; fi; unset __airlock_had%d __airlock_was%d'
                         % (i, k, i, k, i, i))
        script = "\n".join(before + [
            "trap 'return 130 2>/dev/null' INT",
            ". %s </dev/null" % shlex.quote(cell),
            "__airlock_status=$?",
            "trap : INT",
        ] + after + ["printf '%%d\\n' $__airlock_status >&%d" % status_w, ""])
        status = run(script)
        drain()
        if status is None:
            emit({"type": "error", "name": "ShellExited",
                  "value": "the shell exited with status %d; a new one has started, its state is lost" % sh.returncode,
                  "traceback": ""})
            sh = start()
        elif status == 130:
            emit({"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ""})
        elif status != 0:
            emit({"type": "error", "name": "ExitCode", "value": str(status), "traceback": ""})
        try:
            os.remove(cell)
        except OSError:
            pass
        emit({"type": "end"})


if language == "bash":
    bash_main()
else:
    python_main()
