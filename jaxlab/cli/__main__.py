"""`python -m jaxlab.cli`: the same as the `jaxlab` command."""

import sys

from jaxlab.launch import main

sys.exit(main())
