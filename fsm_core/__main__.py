import sys

from fsm_core.cli import main

sys.exit(main())
