"""Fake Strata backend: a test double for strata-router, not Strata.

Run it exactly as the router runs the real server (cwd = this directory):

    python3 -m serve.server --engine strata --config PROFILE --host 127.0.0.1 \
        --port PORT --idle-unload 0 --ready-file READY_PATH

See ../README.md for the CLI, the scripting keys and the log events.
"""
