"""`python -m fabric.server.node`: run a data node (the same as `fabric node start`)."""
import sys

from fabric.server.node.node import main

sys.exit(main())
