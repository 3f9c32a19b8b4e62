"""``python -m codegen.cache [info|clear|prune]``: see codegen.cache."""
import sys

from codegen.cache import main

sys.exit(main())
