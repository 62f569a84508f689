"""E2B's Python SDK over TLS (TestE2BTLS): E2B_API_URL and
E2B_SANDBOX_URL are https, the test's CA in SSL_CERT_FILE. Prints one
JSON line per step. The HTTP version is read from the SDK's own
connection pool (the one its control-plane, files and envd clients
share), on the listener's health check.
"""

import json

from e2b import Sandbox
from e2b.api.client_sync import get_pyqwest_transport
from e2b.connection_config import ConnectionConfig
from pyqwest import SyncRequest


def out(k, v):
    print(json.dumps({"k": k, "v": v}), flush=True)


try:
    cfg = ConnectionConfig()
    pool = get_pyqwest_transport(cfg.proxy, http_version=cfg.http_version, retry_connect=False)
    with pool.execute_sync(SyncRequest("GET", cfg.api_url + "/health")) as r:
        out("version", str(r.http_version))
    sbx = Sandbox.create(template="sh", timeout=60)
    out("run", sbx.commands.run("echo over tls").stdout)
    sbx.files.write("/workspace/t.txt", "tls file")
    out("read", sbx.files.read("/workspace/t.txt"))
    seen = []
    h = sbx.commands.run("echo 1; sleep 0.2; echo 2", background=True)
    out("stream", h.wait(on_stdout=seen.append).exit_code == 0 and "".join(seen) == "1\n2\n")
    out("kill", sbx.kill())
except Exception as e:  # noqa: BLE001 - the Go test reports it
    out("fatal", f"{type(e).__name__}: {e}")
    raise
