import sys

from grpo_client.cli import main

sys.exit(main())
