"""``python -m medbench_cli``: the same as the ``medbench`` console script (the prepare child runs this way)."""

import sys

from medbench_cli.main import main

sys.exit(main())
