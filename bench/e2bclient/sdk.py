"""ComputeSDK's method through the official E2B Python SDK: create -> first
command (`python3 -V`) finished, one at a time or k at once (AsyncSandbox,
asyncio.gather of k create + run, each timed on its own), in one event
loop. A worker, as sdk.mjs: it reads "one e2b" or "burst e2b K" a line on
stdin and answers each with one JSON line on stdout ({"ms": ...} for
one; {"ms": [...], "errors": [...], "wall": ..., "kill": ...} for a
burst; times in ms). Its first line is {"version": the SDK's}. Env:
E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, TOOL.
"""

import asyncio
import json
import os
import sys
import time
from importlib.metadata import version

from e2b import AsyncSandbox

TOOL = os.environ["TOOL"]


def now():
    return time.perf_counter() * 1000


def why(e):
    return f"{type(e).__name__}: {e}"


async def create_run():
    t0 = now()
    sbx = await AsyncSandbox.create(template=TOOL)
    r = await sbx.commands.run("python3 -V")
    t = now() - t0
    if not r.stdout.startswith("Python 3."):
        await sbx.kill()
        raise RuntimeError(f"python3 -V exited 0 but its stdout was {r.stdout!r} (stderr {r.stderr!r})")
    return t, sbx


async def one():
    t, sbx = await create_run()
    await sbx.kill()
    return {"ms": t}


async def burst(k):
    t0 = now()

    async def timed():
        s = now()
        try:
            t, sbx = await create_run()
            return {"ms": t, "sbx": sbx, "end": now()}
        except Exception as e:  # noqa: BLE001 - every failure is reported
            return {"error": why(e), "ms": now() - s, "end": now()}

    got = await asyncio.gather(*(timed() for _ in range(k)))
    wall = max(g["end"] for g in got) - t0
    k0 = now()
    await asyncio.gather(*(g["sbx"].kill() for g in got if "sbx" in g), return_exceptions=True)
    return {
        "ms": [g["ms"] for g in got if "error" not in g],
        "errors": [{"error": g["error"], "ms": g["ms"]} for g in got if "error" in g],
        "wall": wall,
        "kill": now() - k0,
    }


async def main():
    loop = asyncio.get_running_loop()
    print(json.dumps({"version": version("e2b")}), flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        f = line.split()
        try:
            out = await (burst(int(f[2])) if f[0] == "burst" else one())
        except Exception as e:  # noqa: BLE001 - reported to the driver
            out = {"error": why(e)}
        print(json.dumps(out), flush=True)


asyncio.run(main())
