"""`python -m jaxlab.cli`: the same as the `jaxlab` command."""

import sys

from jaxlab.cli import main

sys.exit(main())
