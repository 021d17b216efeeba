"""``python -m minibass.oracle ...`` is ``python -m minibass oracle ...`` (see ``minibass.oracle.cli``)."""

import sys

from minibass.__main__ import main

main(["oracle", *sys.argv[1:]])
