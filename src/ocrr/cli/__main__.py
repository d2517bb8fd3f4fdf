"""``python -m ocrr.cli``: the same as the ``ocrr`` command."""

import sys

from ocrr.cli.main import main

sys.exit(main())
