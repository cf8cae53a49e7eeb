#!/usr/bin/env python
"""Django's command-line entry point for the platform (serve, worker, apitoken, migrate, ...)."""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    # platform/ is a source folder, not a package (a package named `platform` would shadow the
    # standard library): put it, and the repository root for `trainers`, on sys.path.
    for path in (os.path.join(ROOT, "platform"), ROOT):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "grpo_platform.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
