"""A create that narrows the sandbox's egress, through E2B's Python SDK,
both clients. The tool net (TestE2BPythonSDK's config) may reach a.test
and b.test, two names of one upstream on loopback at the port in
AIRLOCK_TEST_NET_PORT; a create may narrow that, never widen it.
"""

import os

import pytest
from e2b import ALL_TRAFFIC, InvalidArgumentException, SandboxException

from conftest import differs_for

PORT = os.environ.get("AIRLOCK_TEST_NET_PORT", "")

pytestmark = pytest.mark.skipif(not PORT, reason="AIRLOCK_TEST_NET_PORT is not set (TestE2BPythonSDK sets it)")


def reached(client, **opts):
    """Which of a.test and b.test a sandbox of the tool net, made with
    opts, reaches."""
    s = client.create("net", **opts)
    try:
        out = s.commands.run(
            f"for h in a.test b.test; do curl -sS --max-time 5 http://$h:{PORT}/ 2>&1 || true; done"
        ).stdout
    finally:
        s.kill()
    return [h for h in ("a.test", "b.test") if f"hello {h}" in out]


def test_the_tools_egress(client):
    assert reached(client) == ["a.test", "b.test"]


def test_no_internet(client):
    assert reached(client, allow_internet_access=False) == []


def test_narrowed(client):
    # airlock's form: allow_out alone narrows to what it names (a port
    # given, or 443).
    assert reached(client, network={"allow_out": [f"a.test:{PORT}"]}) == ["a.test"]


def test_narrowed_as_e2b_documents(request, client):
    differs_for(
        request,
        True,
        "E2B's documented narrowing is deny_out [ALL_TRAFFIC] with allow_out naming the exceptions "
        "(allow_out takes precedence); airlock refuses any deny_out (400 'network.denyOut is not supported')",
        raises=SandboxException,
    )
    assert reached(client, network={"deny_out": [ALL_TRAFFIC], "allow_out": [f"a.test:{PORT}"]}) == ["a.test"]


def test_allow_out_alone(request, client):
    differs_for(
        request,
        True,
        "allow_out without deny_out: on E2B allow_out makes exceptions to deny_out, and alone takes nothing "
        "away (all egress is allowed unless denied; E2B's docs say a domain filter needs the rest denied with "
        "deny_out); airlock narrows the sandbox's egress to what allow_out names",
    )
    assert reached(client, network={"allow_out": [f"a.test:{PORT}"]}) == ["a.test", "b.test"]


def test_wider_refused(client):
    # The operator's config is the ceiling: an entry beyond the tool's
    # egress is refused, never applied (airlock's rule; E2B has no ceiling).
    for entry in ("c.test", "a.test:1", "0.0.0.0/0"):
        with pytest.raises(SandboxException, match="allowOut") as e:
            client.create("net", network={"allow_out": [entry]})
        assert e.value.status_code == 400
