"""The code sandbox: untrusted programs run against their tests (runner.py), isolated by child.py."""
