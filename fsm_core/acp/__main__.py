"""``python -m fsm_core.acp [options]`` is ``fsm-core acp [options]``."""

import sys

from fsm_core.cli import main

sys.exit(main(["acp", *sys.argv[1:]]))
