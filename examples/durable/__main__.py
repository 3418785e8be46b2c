"""``python -m examples.durable``: see :mod:`examples.durable.cli`."""

import sys

from .cli import main

sys.exit(main())
