"""`python -m benchmarks [--quick] [--only W1,W5] [--no-peers] [--json PATH]`: the suite."""
import sys

from .suite import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
