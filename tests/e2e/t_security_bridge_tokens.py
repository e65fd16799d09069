# SPDX-License-Identifier: MIT
"""The tests of t_security_bridge with [routerd] tokens_file set: the bridge
port refuses the public API even with an operator's token, and a run's host
tools still need that run's own token."""
import os
import tempfile

from t_security_bridge import HARNESSES
from t_security_bridge import test_the_bridge_port_reaches_only_its_own_runs_tools  # noqa: F401
from t_security_bridge import test_the_bridge_socket_is_private_and_needs_the_shims_first_line  # noqa: F401

_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write("operator-token-for-the-bridge-test\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
{HARNESSES}"""
