import sys

from tools.servers.cli import main

sys.exit(main())
