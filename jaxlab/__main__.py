"""`python -m jaxlab`: the same as the `jaxlab` command (and `python -m jaxlab.cli`)."""

import sys

from jaxlab.launch import main

sys.exit(main())
