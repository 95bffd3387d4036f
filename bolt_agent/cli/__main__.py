"""``python -m bolt_agent.cli``: the ``bolt-agent`` command."""

import sys

from bolt_agent.cli.main import main

sys.exit(main())
