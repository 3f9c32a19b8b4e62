"""`python -m benchmarks [--quick]`: the eager vs compiled suite (grows with the compiler)."""
import sys

from .eager_overhead import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
